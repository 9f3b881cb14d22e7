/**
 * An independent safetensors writer for tests (written from the format description, sharing no
 * code with cpp/io): 8-byte little-endian header length, JSON header padded with spaces to a
 * multiple of 8 (as the Python writer does), then tensor bytes back to back in header order.
 * Also writes sharded checkpoints with model.safetensors.index.json, and exposes the raw pieces
 * so malformed files can be built on purpose.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export type StDType =
  | 'F32' | 'F16' | 'BF16' | 'I32' | 'U32' | 'U8' | 'I8'
  | 'BOOL' | 'I16' | 'U16' | 'I64' | 'U64' | 'F64' | 'F8_E4M3' | 'F8_E5M2';

export const DTYPE_BYTES: Record<StDType, number> = {
  F32: 4, F16: 2, BF16: 2, I32: 4, U32: 4, U8: 1, I8: 1,
  BOOL: 1, I16: 2, U16: 2, I64: 8, U64: 8, F64: 8, F8_E4M3: 1, F8_E5M2: 1,
};

export interface TensorSpec {
  name: string;
  dtype: StDType;
  shape: number[];
  /** Raw bytes; when absent, deterministic filler of the right length. */
  data?: Uint8Array;
}

export interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

export function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Deterministic bytes (xorshift32) so tests can compare what comes back. */
export function fillerBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

/** The header object and data section for `tensors`, laid out contiguously in the given order. */
export function layout(tensors: TensorSpec[], metadata?: Record<string, string>): { header: Record<string, unknown>; data: Uint8Array } {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  const chunks: Uint8Array[] = [];
  let at = 0;
  tensors.forEach((t, i) => {
    const n = numel(t.shape) * DTYPE_BYTES[t.dtype];
    const bytes = t.data ?? fillerBytes(n, i + 1);
    if (bytes.length !== n) throw new Error(`writer: ${t.name} has ${bytes.length} bytes, shape needs ${n}`);
    const entry: HeaderEntry = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + n] };
    header[t.name] = entry;
    chunks.push(bytes);
    at += n;
  });
  const data = new Uint8Array(at);
  let o = 0;
  for (const c of chunks) { data.set(c, o); o += c.length; }
  return { header, data };
}

/** Assembles a file from header bytes and data; `headerLength` overrides the length field. */
export function assemble(headerBytes: Uint8Array, data: Uint8Array, headerLength?: bigint): Uint8Array {
  const out = new Uint8Array(8 + headerBytes.length + data.length);
  new DataView(out.buffer).setBigUint64(0, headerLength ?? BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  out.set(data, 8 + headerBytes.length);
  return out;
}

/** JSON text -> UTF-8 bytes padded with spaces to a multiple of 8 (unless pad is false). */
export function headerBytes(json: string, pad = true): Uint8Array {
  const raw = new TextEncoder().encode(json);
  if (!pad) return raw;
  const len = Math.ceil(raw.length / 8) * 8;
  const out = new Uint8Array(len).fill(0x20);
  out.set(raw);
  return out;
}

export function encodeSafetensors(tensors: TensorSpec[], metadata?: Record<string, string>, opts: { pad?: boolean } = {}): Uint8Array {
  const { header, data } = layout(tensors, metadata);
  return assemble(headerBytes(JSON.stringify(header), opts.pad ?? true), data);
}

export function writeSafetensors(path: string, tensors: TensorSpec[], metadata?: Record<string, string>, opts: { pad?: boolean } = {}): void {
  writeFileSync(path, encodeSafetensors(tensors, metadata, opts));
}

/** Writes shards plus model.safetensors.index.json into `dir`; returns the weight map. */
export function writeSharded(dir: string, shards: Record<string, TensorSpec[]>, metadata?: Record<string, string>): Record<string, string> {
  mkdirSync(dir, { recursive: true });
  const weightMap: Record<string, string> = {};
  let total = 0;
  for (const [file, tensors] of Object.entries(shards)) {
    writeSafetensors(join(dir, file), tensors, metadata);
    for (const t of tensors) {
      weightMap[t.name] = file;
      total += numel(t.shape) * DTYPE_BYTES[t.dtype];
    }
  }
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));
  return weightMap;
}

// --- element encoders (independent of the native dtype code)

export function f32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

/** float32 -> bfloat16 with round-to-nearest-even on the bit pattern. */
export function bf16Bytes(values: number[]): Uint8Array {
  const f = new Float32Array(values);
  const u = new Uint32Array(f.buffer);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < u.length; i++) {
    const x = u[i]!;
    const lsb = (x >>> 16) & 1;
    out[i] = ((x + 0x7fff + lsb) >>> 16) & 0xffff;
  }
  return new Uint8Array(out.buffer);
}

/** float32 -> IEEE half for values exactly representable in half (tests choose such values). */
export function f16Bytes(values: number[]): Uint8Array {
  const out = new Uint16Array(values.length);
  values.forEach((v, i) => {
    if (v === 0) { out[i] = Object.is(v, -0) ? 0x8000 : 0; return; }
    const sign = v < 0 ? 0x8000 : 0;
    const a = Math.abs(v);
    let e = Math.floor(Math.log2(a));
    if (e < -14) e = -14;  // subnormal range
    const m = a / 2 ** e;
    const exp = e === -14 && m < 1 ? 0 : e + 15;
    const man = Math.round((exp === 0 ? m : m - 1) * 1024);
    if (man >= 1024 || exp >= 31 || Math.abs((exp === 0 ? man / 1024 : 1 + man / 1024) * 2 ** e - a) > 0)
      throw new Error(`f16Bytes: ${v} is not exactly representable`);
    out[i] = sign | (exp << 10) | man;
  });
  return new Uint8Array(out.buffer);
}

export function i32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Int32Array(values).buffer);
}
export function u32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Uint32Array(values).buffer);
}
export function i8Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Int8Array(values).buffer);
}
