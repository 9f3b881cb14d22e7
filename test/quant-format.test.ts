// MLX affine format and quantizer: native quantize/dequantize against the independent TypeScript
// reference in helpers/quant_ref.ts (bit layout from the format's definition, MLX's quantizer in
// emulated float32), for every bits x group size, scale dtypes and edge cases.
import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';
import type { NativeFloatDtype, NativeQuantWeight } from '../types/native/quant.js';
import {
  f32ToBf16, randomNormal, readFloat, refDequantize, refPack, refQuantize, refUnpack, storeAs, type FloatDtype,
} from './helpers/quant_ref.js';

const BITS = [2, 3, 4, 5, 6, 8];
const GROUPS = [32, 64, 128];

async function quantize(w: Float32Array, rows: number, cols: number, bits: number, groupSize: number, scaleDtype: NativeFloatDtype): Promise<NativeQuantWeight> {
  const r = await native().quantizeAffine({ data: w, dtype: 'float32', rows, cols }, bits, groupSize, scaleDtype);
  return { ...r, scaleDtype, rows, cols, bits, groupSize };
}

function floats(a: Float32Array | Uint16Array, dtype: FloatDtype): number[] {
  return Array.from({ length: a.length }, (_, i) => readFloat(a, dtype, i));
}

function expectSameFloats(actual: ArrayLike<number>, expected: ArrayLike<number>): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < actual.length; i++) {
    if (!Object.is(actual[i], expected[i])) {
      throw new Error(`element ${i}: got ${actual[i]}, expected ${expected[i]}`);
    }
  }
}

describe('MLX affine bit layout', () => {
  it('packs 3-bit values 0..7 into the bytes MLX uses (88 c6 fa)', async () => {
    // w = 7 - q gives q = 0..7 exactly under MLX's quantizer (scale -1, bias 7).
    const cols = 32;
    const w = new Float32Array(cols).map((_, k) => 7 - (k % 8));
    const qw = await quantize(w, 1, cols, 3, 32, 'float32');
    const bytes = new Uint8Array(qw.packed.buffer, qw.packed.byteOffset, qw.packed.byteLength);
    expect(Array.from(bytes.slice(0, 3))).toEqual([0x88, 0xc6, 0xfa]);
    expect(qw.packed.length).toBe(3);
    expect(Array.from(qw.scales as Float32Array)).toEqual([-1]);
    expect(Array.from(qw.biases as Float32Array)).toEqual([7]);
  });

  it('packs 4-bit and 8-bit values from bit 0 of each uint32 upward', async () => {
    const w4 = new Float32Array(32).map((_, k) => 15 - (k % 16));
    const q4 = await quantize(w4, 1, 32, 4, 32, 'float32');
    expect(q4.packed[0]).toBe(0x76543210);
    expect(q4.packed[1]).toBe(0xfedcba98);
    // q[k] = 8k (k < 31), q[31] = 255; w = 255 - q under scale -1, bias 255.
    const w8 = new Float32Array(32).map((_, k) => 255 - (k === 31 ? 255 : 8 * k));
    const q8 = await quantize(w8, 1, 32, 8, 32, 'float32');
    expect(q8.packed[0]).toBe(0x18100800);
    expect(q8.packed[7]! >>> 24).toBe(255);
  });

  it('reference pack and unpack are inverse for every width', () => {
    for (const bits of BITS) {
      const cols = 64;
      const q = new Uint8Array(2 * cols).map((_, i) => (i * 7 + 3) % (1 << bits));
      expect(Array.from(refUnpack(refPack(q, 2, cols, bits), 2, cols, bits))).toEqual(Array.from(q));
    }
  });
});

describe('quantizer and dequantizer vs the reference', () => {
  for (const bits of BITS) {
    for (const groupSize of GROUPS) {
      it(`bits ${bits}, group ${groupSize}: identical packed values, scales, biases and dequantization`, async () => {
        const rows = 6;
        const cols = 256;
        const w = randomNormal(rows * cols, bits * 1000 + groupSize, 0.05);
        for (const dtype of ['bfloat16', 'float16', 'float32'] as const) {
          const qw = await quantize(w, rows, cols, bits, groupSize, dtype);
          const ref = refQuantize(w, rows, cols, bits, groupSize, dtype);
          expect(qw.packed.length).toBe((rows * cols * bits) / 32);
          expect(Array.from(qw.packed)).toEqual(Array.from(refPack(ref.q, rows, cols, bits)));
          expectSameFloats(floats(qw.scales, dtype), ref.scales);
          expectSameFloats(floats(qw.biases, dtype), ref.biases);
          // Dequantization equals the formula bit for bit.
          const deq = native().dequantizeAffine(qw);
          const expected = refDequantize(refUnpack(qw.packed, rows, cols, bits), floats(qw.scales, dtype), floats(qw.biases, dtype), rows, cols, groupSize);
          expectSameFloats(deq, expected);
          // And it is a quantization of w: MLX's rescale to make the edge exact can push the far
          // end of a group up to half a step past the last level, so the error bound is one step
          // (plus the stored scale's and bias's rounding).
          const groups = cols / groupSize;
          for (let i = 0; i < rows * cols; i++) {
            const g = Math.floor(i / cols) * groups + Math.floor((i % cols) / groupSize);
            const step = Math.abs(ref.scales[g]!);
            const slack = dtype === 'float32' ? 1e-6 : (dtype === 'float16' ? 2 ** -10 : 2 ** -7) * (1 << bits);
            expect(Math.abs(deq[i]! - w[i]!)).toBeLessThanOrEqual(step * (1 + slack) + 1e-7);
          }
        }
      });
    }
  }
});

describe('edge cases', () => {
  it('constant groups and zeros dequantize exactly', async () => {
    const cols = 128;
    const w = new Float32Array(2 * cols);
    w.fill(0.3125, 0, 64);        // constant group
    w.fill(0, 64, 128);           // zero group
    w.fill(-2.5, 128, 192);       // negative constant
    w.fill(1e-3, 192, 256);
    for (const bits of BITS) {
      for (const dtype of ['float32', 'bfloat16', 'float16'] as const) {
        const qw = await quantize(w, 2, cols, bits, 64, dtype);
        const deq = native().dequantizeAffine(qw);
        const ref = refQuantize(w, 2, cols, bits, 64, dtype);
        expectSameFloats(floats(qw.scales, dtype), ref.scales);
        for (let i = 0; i < w.length; i++) expect(deq[i]).toBeCloseTo(storeAs(w[i]!, dtype), 12);
        expect(Array.from(deq.slice(64, 128)).every((v) => v === 0)).toBe(true);
      }
    }
  });

  it('extreme magnitudes: huge, tiny, and f16 overflow/underflow of scales follow the reference', async () => {
    const cols = 64;
    const rows = 4;
    const w = new Float32Array(rows * cols);
    const base = randomNormal(rows * cols, 7);
    for (let i = 0; i < cols; i++) {
      w[i] = base[i]! * 1e30;                 // scales overflow f16
      w[cols + i] = base[cols + i]! * 1e-30;  // scales underflow f16 and bf16 keeps them
      w[2 * cols + i] = base[2 * cols + i]! * 6e4;
      w[3 * cols + i] = i === 5 ? 3.0e38 : i === 9 ? -3.0e38 : base[3 * cols + i]!;
    }
    for (const bits of [3, 4, 8]) {
      for (const dtype of ['float32', 'bfloat16', 'float16'] as const) {
        const qw = await quantize(w, rows, cols, bits, 32, dtype);
        const ref = refQuantize(w, rows, cols, bits, 32, dtype);
        expect(Array.from(qw.packed)).toEqual(Array.from(refPack(ref.q, rows, cols, bits)));
        expectSameFloats(floats(qw.scales, dtype), ref.scales);
        expectSameFloats(floats(qw.biases, dtype), ref.biases);
        const deq = native().dequantizeAffine(qw);
        const expected = refDequantize(ref.q, ref.scales, ref.biases, rows, cols, 32);
        expectSameFloats(deq, expected);
      }
    }
  });

  it('bfloat16 and float16 inputs quantize like their float32 values', async () => {
    const rows = 3;
    const cols = 128;
    const w = randomNormal(rows * cols, 99, 0.02);
    const wb = new Uint16Array(w.length).map((_, i) => f32ToBf16(w[i]!));
    const wf = new Float32Array(w.length).map((_, i) => readFloat(wb, 'bfloat16', i));
    const a = await native().quantizeAffine({ data: wb, dtype: 'bfloat16', rows, cols }, 4, 64, 'bfloat16');
    const b = await native().quantizeAffine({ data: wf, dtype: 'float32', rows, cols }, 4, 64, 'bfloat16');
    expect(Array.from(a.packed)).toEqual(Array.from(b.packed));
    expect(Array.from(a.scales)).toEqual(Array.from(b.scales));
  });

  it('rejects unsupported bits, group sizes and shapes with typed errors', async () => {
    const w = new Float32Array(64);
    await expect(native().quantizeAffine({ data: w, dtype: 'float32', rows: 1, cols: 64 }, 7, 64, 'float32')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'bits' });
    await expect(native().quantizeAffine({ data: w, dtype: 'float32', rows: 1, cols: 64 }, 4, 48, 'float32')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'groupSize' });
    await expect(native().quantizeAffine({ data: w, dtype: 'float32', rows: 2, cols: 32 }, 4, 64, 'float32')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(() => native().quantizeAffine({ data: w, dtype: 'float32', rows: 2, cols: 64 }, 4, 64, 'float32')).toThrow(TypeError);
  });
});
