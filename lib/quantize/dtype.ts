/**
 * Raw little-endian float buffers converted between float32, float16 and bfloat16 with
 * round-to-nearest-even (the same rounding as the native core), for the tensors a quantized
 * checkpoint keeps in floating point (norms, biases, layers left unquantized).
 */
export type FloatFileDType = 'F32' | 'F16' | 'BF16';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function f32ToBf16Bits(u: number): number {
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

function f32ToF16Bits(u: number): number {
  const sign = (u >>> 16) & 0x8000;
  const expBits = (u >>> 23) & 0xff;
  let man = u & 0x7fffff;
  if (expBits === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  const exp = expBits - 127 + 15;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    man |= 0x800000;
    const shift = 14 - exp;
    const half = 1 << (shift - 1);
    let r = man >>> shift;
    const rem = man & ((1 << shift) - 1);
    if (rem > half || (rem === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (exp << 10) | (man >>> 13);
  const rem = man & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1))) r++;
  return sign | r;
}

function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** Reads any float buffer as float32 values. */
export function toFloat32(data: Uint8Array, from: FloatFileDType): Float32Array {
  const n = data.byteLength / (from === 'F32' ? 4 : 2);
  const copy = new Uint8Array(data);  // aligned private copy
  if (from === 'F32') return new Float32Array(copy.buffer, 0, n);
  const h = new Uint16Array(copy.buffer, 0, n);
  const out = new Float32Array(n);
  if (from === 'BF16') {
    const o = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) o[i] = (h[i]! << 16) >>> 0;
  } else {
    for (let i = 0; i < n; i++) out[i] = f16BitsToF32(h[i]!);
  }
  return out;
}

/** Converts a float buffer to `to`; returns the input itself when the dtypes agree. */
export function convertFloat(data: Uint8Array, from: FloatFileDType, to: FloatFileDType): Uint8Array {
  if (from === to) return data;
  const v = toFloat32(data, from);
  if (to === 'F32') return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const bits = new Uint32Array(v.buffer, v.byteOffset, v.length);
  const out = new Uint16Array(v.length);
  if (to === 'BF16') for (let i = 0; i < v.length; i++) out[i] = f32ToBf16Bits(bits[i]!);
  else for (let i = 0; i < v.length; i++) out[i] = f32ToF16Bits(bits[i]!);
  return new Uint8Array(out.buffer);
}

export function isFloatDType(d: string): d is FloatFileDType {
  return d === 'F32' || d === 'F16' || d === 'BF16';
}

export function nativeFloatName(d: FloatFileDType): 'float32' | 'float16' | 'bfloat16' {
  return d === 'F32' ? 'float32' : d === 'F16' ? 'float16' : 'bfloat16';
}

/** float32 -> bfloat16 bits (exported for tests). */
export function bf16Bits(x: number): number {
  f32[0] = x;
  return f32ToBf16Bits(u32[0]!);
}
