// The LM head of an oracle fixture read straight from its safetensors file (float64, F32 or BF16)
// without the library, and the product of final hidden states with it (plus the final soft-cap):
// an independent route from hidden states to logits.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

type Header = Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;

function header(b: Buffer): { n: number; h: Header } {
  const n = Number(b.readBigUInt64LE(0));
  return { n, h: JSON.parse(b.subarray(8, 8 + n).toString('utf8')) as Header };
}

function readTensor(b: Buffer, name: string): { shape: number[]; data: Float64Array } {
  const { n, h } = header(b);
  const t = h[name];
  if (!t) throw new Error(`${name} is not in the file`);
  const base = 8 + n + t.data_offsets[0];
  const count = t.shape.reduce((a, x) => a * x, 1);
  const data = new Float64Array(count);
  const bf = new Float32Array(1), bits = new Uint32Array(bf.buffer);
  for (let i = 0; i < count; i++) {
    if (t.dtype === 'F32') data[i] = b.readFloatLE(base + 4 * i);
    else if (t.dtype === 'BF16') {
      bits[0] = b.readUInt16LE(base + 2 * i) << 16;
      data[i] = bf[0]!;
    } else throw new Error(`dtype ${t.dtype}`);
  }
  return { shape: t.shape, data };
}

export interface LmHead {
  vocab: number;
  hidden: number;
  /** [vocab, hidden] row-major. */
  weight: Float64Array;
  /** final_logit_softcapping of config.json, 0 when none. */
  softcap: number;
}

/** lm_head.weight, or the embedding when the head is tied (no lm_head.weight in the file). */
export function readLmHead(dir: string): LmHead {
  const b = readFileSync(join(dir, 'model.safetensors'));
  const own = 'lm_head.weight' in header(b).h;
  const t = readTensor(b, own ? 'lm_head.weight' : 'model.embed_tokens.weight');
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const softcap = typeof cfg.final_logit_softcapping === 'number' ? cfg.final_logit_softcapping : 0;
  return { vocab: t.shape[0]!, hidden: t.shape[1]!, weight: t.data, softcap };
}

/** Logits [T, vocab] of hidden states [T, hidden], summed in float64. */
export function headLogits(head: LmHead, hidden: Float32Array): Float64Array {
  const H = head.hidden, V = head.vocab, T = hidden.length / H;
  const out = new Float64Array(T * V);
  for (let t = 0; t < T; t++) {
    for (let v = 0; v < V; v++) {
      let s = 0;
      for (let j = 0; j < H; j++) s += hidden[t * H + j]! * head.weight[v * H + j]!;
      out[t * V + v] = head.softcap > 0 ? head.softcap * Math.tanh(s / head.softcap) : s;
    }
  }
  return out;
}

/** Largest |got - ref| / max|ref| over the rows of [rows, vocab] logits. */
export function worstRelative(got: ArrayLike<number>, ref: ArrayLike<number>, vocab: number): number {
  let worst = 0;
  for (let r = 0; r < ref.length / vocab; r++) {
    let rowMax = 0, diff = 0;
    for (let v = 0; v < vocab; v++) {
      rowMax = Math.max(rowMax, Math.abs(ref[r * vocab + v]!));
      diff = Math.max(diff, Math.abs(got[r * vocab + v]! - ref[r * vocab + v]!));
    }
    worst = Math.max(worst, diff / rowMax);
  }
  return worst;
}
