/**
 * The quantized-op suite, run once per CPU path (quant-ops*.test.ts set MLXB_CPU before the addon
 * loads): qmatmul against float64 matmul on the reference-dequantized weights, qembedding against
 * the reference rows, for every bits x group size, scale dtypes and row counts that hit every
 * kernel tile shape.
 */
import { describe, expect, it } from 'vitest';

import { native } from '../../lib/native/index.js';
import type { NativeFloatDtype, NativeQuantWeight } from '../../types/native/quant.js';
import { randomNormal, readFloat, refDequantize, refUnpack, rintEven } from './quant_ref.js';

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

/**
 * The integer path (SIMD, 4- and 8-bit): x quantized to int16 per block (64 elements for 4-bit
 * weights with groups >= 64, else 32): d = max|x| / 32767, xq = rint(x * (32767 / max|x|));
 * y = sum_g s_g * sum_blocks d * sum(q * xq) + b_g * sum_g(x).
 */
function intPathRef(x: Float32Array, M: number, w: NativeQuantWeight, q: Uint8Array, s: number[], b: number[]): Float64Array {
  const K = w.cols;
  const N = w.rows;
  const gs = w.groupSize;
  const block = w.bits === 4 && gs >= 64 ? 64 : 32;
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    const xq = new Int16Array(K);
    const d = new Float64Array(K / block);
    for (let blk = 0; blk < K / block; blk++) {
      let amax = 0;
      for (let j = 0; j < block; j++) amax = Math.max(amax, Math.abs(x[m * K + blk * block + j]!));
      d[blk] = Math.fround(amax / 32767);
      const id = amax > 0 ? Math.fround(32767 / amax) : 0;
      for (let j = 0; j < block; j++) xq[blk * block + j] = Math.min(32767, Math.max(-32767, rintEven(Math.fround(x[m * K + blk * block + j]! * id))));
    }
    for (let n = 0; n < N; n++) {
      let y = 0;
      for (let g = 0; g < K / gs; g++) {
        let inner = 0;
        let xs = 0;
        for (let blk = (g * gs) / block; blk < ((g + 1) * gs) / block; blk++) {
          let isum = 0;
          for (let j = 0; j < block; j++) isum += q[n * K + blk * block + j]! * xq[blk * block + j]!;
          inner += d[blk]! * isum;
        }
        for (let k = g * gs; k < (g + 1) * gs; k++) xs += x[m * K + k]!;
        y += s[n * (K / gs) + g]! * inner + b[n * (K / gs) + g]! * xs;
      }
      out[m * N + n] = y;
    }
  }
  return out;
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
          const intPath = path !== 'scalar' && (bits === 4 || bits === 8);
          const groups = (N * K) / groupSize;
          const sv = Array.from({ length: groups }, (_, i) => readFloat(w.scales, w.scaleDtype, i));
          const bv = Array.from({ length: groups }, (_, i) => readFloat(w.biases, w.scaleDtype, i));
          const q = refUnpack(w.packed, N, K, bits);
          for (const M of [1, 2, 3, 5, 8, 13]) {
            const x = randomNormal(M * K, M * 17 + bits);
            const y = native().qmatmulAffine({ x, m: M, weight: w, bias: M === 3 ? bias : undefined });
            expect(y.length).toBe(M * N);
            if (intPath) {
              // Exactly the integer path's arithmetic (up to float32 summation order) ...
              const yi = intPathRef(x, M, w, q, sv, bv);
              for (let i = 0; i < M * N; i++) {
                const n = i % N;
                const ref = yi[i]! + (M === 3 ? bias[n]! : 0);
                let mag = 0;
                for (let k = 0; k < K; k++) mag += Math.abs(x[Math.floor(i / N) * K + k]! * wd[n * K + k]!);
                if (Math.abs(y[i]! - ref) > 2e-6 * mag + 1e-6) throw new Error(`int path M=${M} i=${i}: got ${y[i]}, expected ${ref}`);
              }
            }
            for (let m = 0; m < M; m++) {
              for (let n = 0; n < N; n++) {
                let ref = M === 3 ? bias[n]! : 0;
                let mag = 0;
                for (let k = 0; k < K; k++) {
                  ref += x[m * K + k]! * wd[n * K + k]!;
                  mag += Math.abs(x[m * K + k]! * wd[n * K + k]!);
                }
                const err = Math.abs(y[m * N + n]! - ref);
                // ... and close to the exact product: int16 activations cost about 1e-4 of the
                // magnitude at most; the float paths are exact up to summation order.
                if (err > (intPath ? 1e-4 : 2e-6) * mag + 1e-6) throw new Error(`M=${M} m=${m} n=${n}: got ${y[m * N + n]}, expected ${ref} (err ${err}, mag ${mag})`);
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
