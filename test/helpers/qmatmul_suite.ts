/**
 * The quantized-op suite, run once per CPU path (quant-ops*.test.ts set MLXB_CPU before the addon
 * loads): qmatmul against float64 matmul on the reference-dequantized weights, qembedding against
 * the reference rows, for every bits x group size, scale dtypes and row counts that hit every
 * kernel tile shape.
 */
import { describe, expect, it } from 'vitest';

import { native } from '../../lib/native/index.js';
import type { NativeFloatDtype, NativeQuantWeight } from '../../types/native/quant.js';
import { randomNormal, readFloat, refDequantize, refUnpack } from './quant_ref.js';

async function makeWeight(rows: number, cols: number, bits: number, groupSize: number, scaleDtype: NativeFloatDtype, seed: number): Promise<NativeQuantWeight> {
  const w = randomNormal(rows * cols, seed, 0.05);
  const r = await native().quantizeAffine({ data: w, dtype: 'float32', rows, cols }, bits, groupSize, scaleDtype);
  return { ...r, scaleDtype, rows, cols, bits, groupSize };
}

function refWeights(w: NativeQuantWeight): Float32Array {
  const groups = (w.rows * w.cols) / w.groupSize;
  const s = Array.from({ length: groups }, (_, i) => readFloat(w.scales, w.scaleDtype, i));
  const b = Array.from({ length: groups }, (_, i) => readFloat(w.biases, w.scaleDtype, i));
  return refDequantize(refUnpack(w.packed, w.rows, w.cols, w.bits), s, b, w.rows, w.cols, w.groupSize);
}

export function quantOpsSuite(path: string): void {
  describe(`quantized CPU ops (${path})`, () => {
    for (const bits of [2, 3, 4, 5, 6, 8]) {
      for (const groupSize of [32, 64, 128]) {
        it(`qmatmul bits ${bits} group ${groupSize} equals matmul on the dequantized weights`, async () => {
          const K = 256;
          const N = 37;
          const dtype: NativeFloatDtype = groupSize === 64 ? 'bfloat16' : groupSize === 32 ? 'float16' : 'float32';
          const w = await makeWeight(N, K, bits, groupSize, dtype, bits * 31 + groupSize);
          const wd = refWeights(w);
          const bias = randomNormal(N, 5);
          for (const M of [1, 2, 3, 5, 8, 13]) {
            const x = randomNormal(M * K, M * 17 + bits);
            const y = native().qmatmulAffine({ x, m: M, weight: w, bias: M === 3 ? bias : undefined });
            expect(y.length).toBe(M * N);
            for (let m = 0; m < M; m++) {
              for (let n = 0; n < N; n++) {
                let ref = M === 3 ? bias[n]! : 0;
                let mag = 0;
                for (let k = 0; k < K; k++) {
                  ref += x[m * K + k]! * wd[n * K + k]!;
                  mag += Math.abs(x[m * K + k]! * wd[n * K + k]!);
                }
                const err = Math.abs(y[m * N + n]! - ref);
                if (err > 2e-6 * mag + 1e-6) throw new Error(`M=${M} m=${m} n=${n}: got ${y[m * N + n]}, expected ${ref} (err ${err}, mag ${mag})`);
              }
            }
          }
        });
      }
    }

    it('qembedding returns the dequantized rows times the scale, bit for bit', async () => {
      for (const [bits, groupSize] of [[4, 64], [8, 32], [3, 128], [6, 64]] as const) {
        const w = await makeWeight(50, 128, bits, groupSize, 'bfloat16', bits);
        const wd = refWeights(w);
        const ids = new Int32Array([0, 49, 7, 7, 23]);
        for (const scale of [1, 45.25]) {
          const out = native().qembeddingAffine({ ids, weight: w, scale });
          for (let t = 0; t < ids.length; t++) {
            for (let h = 0; h < 128; h++) {
              const expected = scale === 1 ? wd[ids[t]! * 128 + h]! : Math.fround(wd[ids[t]! * 128 + h]! * scale);
              if (!Object.is(out[t * 128 + h], expected)) throw new Error(`t=${t} h=${h}: ${out[t * 128 + h]} vs ${expected}`);
            }
          }
        }
      }
    });

    it('qembedding rejects ids outside the vocabulary with a typed error', async () => {
      const w = await makeWeight(10, 64, 4, 64, 'bfloat16', 3);
      expect(() => native().qembeddingAffine({ ids: new Int32Array([3, 10]), weight: w })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'ids' }));
      expect(() => native().qembeddingAffine({ ids: new Int32Array([-1]), weight: w })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    });
  });
}
