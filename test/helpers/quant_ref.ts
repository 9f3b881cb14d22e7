/**
 * An independent TypeScript reference of the MLX affine format, written from its definition
 * (not from our C++): a row of `cols` b-bit values is one little-endian bit stream over the row's
 * uint32 words, value k at stream bits [k*b, (k+1)*b), stream bit i = bit (i % 32) of word
 * floor(i / 32). Dequantized value = fround(fround(scale * q) + bias). The quantizer is MLX's,
 * emulated in float32 with Math.fround after every operation.
 */

const f = Math.fround;

export type FloatDtype = 'float32' | 'float16' | 'bfloat16';

/** Round half to even (C's rint in the default rounding mode). */
export function rintEven(x: number): number {
  const r = Math.round(x);
  if (Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0) return r - 1;
  return r;
}

export function refUnpack(packed: Uint32Array, rows: number, cols: number, bits: number): Uint8Array {
  const wordsPerRow = (cols * bits) / 32;
  const out = new Uint8Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < cols; k++) {
      let v = 0;
      for (let b = 0; b < bits; b++) {
        const i = k * bits + b;
        const word = packed[r * wordsPerRow + Math.floor(i / 32)]!;
        v |= ((word >>> (i % 32)) & 1) << b;
      }
      out[r * cols + k] = v;
    }
  }
  return out;
}

export function refPack(q: Uint8Array, rows: number, cols: number, bits: number): Uint32Array {
  const wordsPerRow = (cols * bits) / 32;
  const out = new Uint32Array(rows * wordsPerRow);
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < cols; k++) {
      for (let b = 0; b < bits; b++) {
        if ((q[r * cols + k]! >> b) & 1) {
          const i = k * bits + b;
          const idx = r * wordsPerRow + Math.floor(i / 32);
          out[idx] = (out[idx]! | (1 << (i % 32))) >>> 0;
        }
      }
    }
  }
  return out;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32Bits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

export function bf16ToF32(h: number): number {
  u32[0] = (h << 16) >>> 0;
  return f32[0]!;
}

/** float32 -> bfloat16 bits, round to nearest even. */
export function f32ToBf16(x: number): number {
  const u = f32Bits(x);
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** float32 value -> the float16 value nearest to it (ties to even), as a number. */
export function roundToF16(x: number): number {
  if (Number.isNaN(x) || !Number.isFinite(x)) return x;
  const a = Math.abs(x);
  const s = x < 0 || Object.is(x, -0) ? -1 : 1;
  if (a >= 65520) return s * Infinity;
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  const quantum = 2 ** (Math.max(e, -14) - 10);
  const r = rintEven(a / quantum) * quantum;
  return r === 0 ? s * 0 : s * r;
}

/** The value a float32 becomes when stored as `dtype` and read back. */
export function storeAs(x: number, dtype: FloatDtype): number {
  if (dtype === 'float32') return f(x);
  if (dtype === 'bfloat16') return bf16ToF32(f32ToBf16(x));
  return roundToF16(x);
}

/** Reads element i of a scales/biases array of `dtype`. */
export function readFloat(a: Float32Array | Uint16Array, dtype: FloatDtype, i: number): number {
  if (dtype === 'float32') return a[i]!;
  return dtype === 'bfloat16' ? bf16ToF32(a[i]!) : f16ToF32(a[i]!);
}

export interface RefQuantized {
  q: Uint8Array;          // unpacked values [rows * cols]
  scales: Float64Array;   // as stored (after rounding to the dtype), as numbers
  biases: Float64Array;
}

/** MLX's affine quantizer in emulated float32, on w's values stored as `dtype` (MLX quantizes a tensor of the scales' dtype). */
export function refQuantize(w0: Float32Array, rows: number, cols: number, bits: number, groupSize: number, dtype: FloatDtype): RefQuantized {
  const w = w0.map((v) => storeAs(v, dtype));
  const nBins = (1 << bits) - 1;
  const eps = f(1e-7);
  const groups = cols / groupSize;
  const q = new Uint8Array(rows * cols);
  const scales = new Float64Array(rows * groups);
  const biases = new Float64Array(rows * groups);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      const base = r * cols + g * groupSize;
      let wMin = Infinity;
      let wMax = -Infinity;
      for (let j = 0; j < groupSize; j++) {
        wMin = Math.min(wMin, w[base + j]!);
        wMax = Math.max(wMax, w[base + j]!);
      }
      const mask = Math.abs(wMin) > Math.abs(wMax);
      let scale = Math.max(f(f(wMax - wMin) / nBins), eps);
      scale = mask ? scale : -scale;
      const edge = mask ? wMin : wMax;
      const q0 = rintEven(f(edge / scale));
      let bias = 0;
      if (q0 !== 0) {
        scale = f(edge / q0);
        bias = edge;
      }
      for (let j = 0; j < groupSize; j++) {
        const v = rintEven(f(f(w[base + j]! - bias) / scale));
        q[base + j] = Math.min(Math.max(v, 0), nBins);
      }
      scales[r * groups + g] = storeAs(scale, dtype);
      biases[r * groups + g] = storeAs(bias, dtype);
    }
  }
  return { q, scales, biases };
}

/** The format's formula for every element: fround(fround(s * q) + b). */
export function refDequantize(q: Uint8Array, scales: ArrayLike<number>, biases: ArrayLike<number>, rows: number, cols: number, groupSize: number): Float32Array {
  const out = new Float32Array(rows * cols);
  const groups = cols / groupSize;
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < cols; k++) {
      const g = r * groups + Math.floor(k / groupSize);
      out[r * cols + k] = f(f(scales[g]! * q[r * cols + k]!) + biases[g]!);
    }
  }
  return out;
}

/** Deterministic pseudo-random float32 values (mulberry32 + Box-Muller). */
export function randomNormal(n: number, seed: number, std = 1): Float32Array {
  let s = seed >>> 0;
  const next = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = Math.max(next(), 1e-12);
    out[i] = std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next());
  }
  return out;
}
