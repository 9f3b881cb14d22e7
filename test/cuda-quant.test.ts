// Opt-in GPU check (MLXB_TEST_CUDA=1): L2 of DESIGN.md on CUDA. The quantized fixtures (llama,
// qwen3 and gemma3_text at 4 and 8 bits, a mixed-precision llama, and bfloat16 hidden-256
// llama / qwen3 / gemma3_text at 4 bits whose shapes the default tensor-core GEMVs take) run on
// the GPU against transformers float32 on the independently dequantized weights (logits.f32 for
// the prompt in one prefill: qembedding and the dense path of qmatmul, and in chunks of T - 8, 6
// and 2 rows into one session: the GEMV for 2-8 rows; greedy_logits.f32 for prefill then one
// token per step: the one-row GEMV). float32 activations: argmax equal wherever the oracle's
// top-2 margin exceeds 0.05 and mean KL(oracle || ours) <= 1e-3. bfloat16 activations: the same
// KL bound (their logits of magnitude 8..16 are 0.0625 apart, coarser than the margin rule).
// On the GPU machine without vitest: node scripts/cuda/quant-l2-check.mjs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';
const ROOT = join(import.meta.dirname, 'fixtures', 'quant');
const NAMES = Object.keys(JSON.parse(readFileSync(join(ROOT, 'manifest.json'), 'utf8')).fixtures as Record<string, unknown>);

function readF32(file: string): Float32Array {
  const buf = readFileSync(file);
  return new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
}

/** Mean KL(ref || got) over rows, and the rows whose argmax differs where the oracle's margin > 0.05. */
function compare(ref: Float32Array, got: Float32Array, vocab: number, margins: number[]): { meanKl: number; flips: number[] } {
  const rows = ref.length / vocab;
  let kl = 0;
  const flips: number[] = [];
  for (let r = 0; r < rows; r++) {
    const a = ref.subarray(r * vocab, (r + 1) * vocab);
    const b = got.subarray(r * vocab, (r + 1) * vocab);
    let ma = -Infinity, mb = -Infinity, ia = 0, ib = 0;
    for (let i = 0; i < vocab; i++) {
      if (a[i]! > ma) { ma = a[i]!; ia = i; }
      if (b[i]! > mb) { mb = b[i]!; ib = i; }
    }
    let za = 0, zb = 0;
    for (let i = 0; i < vocab; i++) { za += Math.exp(a[i]! - ma); zb += Math.exp(b[i]! - mb); }
    for (let i = 0; i < vocab; i++) {
      const la = a[i]! - ma - Math.log(za), lb = b[i]! - mb - Math.log(zb);
      kl += Math.exp(la) * (la - lb);
    }
    if (margins[r]! > 0.05 && ia !== ib) flips.push(r);
  }
  return { meanKl: kl / rows, flips };
}

describe.skipIf(!enabled)('quantized models on CUDA vs transformers on the dequantized weights (L2)', () => {
  for (const dtype of ['float32', 'bfloat16'] as const) {
    for (const name of NAMES) {
      it(`${name} (${dtype} activations): prefill, chunked prefill and stepped decode`, async () => {
        const dir = join(ROOT, name);
        const o = JSON.parse(readFileSync(join(dir, 'oracle.json'), 'utf8'));
        const V = o.vocab_size as number;
        const prompt = Int32Array.from(o.prompt_ids as number[]);
        const greedy = o.greedy_tokens as number[];
        const model = await native().loadModel(dir, { device: 'cuda', dtype });
        try {
          const full = await model.forward(prompt, true);
          const T = prompt.length;
          const chunkSession = model.createSession(T + 1);
          const chunked = new Float32Array(T * V);
          for (const [a, b] of [[0, T - 8], [T - 8, T - 2], [T - 2, T]] as const) chunked.set(await chunkSession.forward(prompt.subarray(a, b), true), a * V);
          chunkSession.dispose();
          const session = model.createSession(prompt.length + greedy.length + 1);
          const steps = [await session.forward(prompt, false)];
          for (let i = 0; i + 1 < greedy.length; i++) steps.push(await session.forward(Int32Array.of(greedy[i]!), false));
          session.dispose();
          const stepped = new Float32Array(steps.length * V);
          steps.forEach((s, i) => stepped.set(s, i * V));
          for (const [ref, got, margins] of [
            [readF32(join(dir, 'logits.f32')), full, o.prompt_top2_margins as number[]],
            [readF32(join(dir, 'logits.f32')), chunked, o.prompt_top2_margins as number[]],
            [readF32(join(dir, 'greedy_logits.f32')), stepped, o.greedy_top2_margins as number[]],
          ] as const) {
            expect(got.length).toBe(ref.length);
            const r = compare(ref, got, V, margins);
            expect(r.meanKl).toBeLessThanOrEqual(1e-3);
            if (dtype === 'float32') expect(r.flips).toEqual([]);
          }
        } finally {
          model.dispose();
        }
      });
    }
  }
});
