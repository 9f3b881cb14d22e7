/**
 * Writing safetensors files: an 8-byte little-endian header length, a JSON header (tensors in
 * data order, then __metadata__) padded with spaces to a multiple of 8, then the tensors' bytes
 * back to back. Data arrives tensor by tensor in header order, so a file is streamed, never held
 * in memory whole.
 */
import type { FileHandle } from 'node:fs/promises';

import { InternalError } from '../errors.js';

export interface HeaderTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly nbytes: number;
}

export function encodeHeader(tensors: readonly HeaderTensor[], metadata: Record<string, string>): Uint8Array {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.nbytes] };
    offset += t.nbytes;
  }
  header['__metadata__'] = metadata;
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += ' ';
  const body = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + body.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(body.length), true);
  out.set(body, 8);
  return out;
}

/** Streams one safetensors file: write(header) once, then append() each tensor in order. */
export class SafetensorsStream {
  private index = 0;
  private position = 0;

  constructor(private readonly file: FileHandle, private readonly tensors: readonly HeaderTensor[]) {}

  async begin(metadata: Record<string, string>): Promise<void> {
    const h = encodeHeader(this.tensors, metadata);
    await this.file.write(h, 0, h.length, 0);
    this.position = h.length;
  }

  async append(name: string, data: Uint8Array): Promise<void> {
    const t = this.tensors[this.index];
    if (!t || t.name !== name || t.nbytes !== data.byteLength)
      throw new InternalError(`safetensors writer: expected ${t ? `${t.name} (${t.nbytes} bytes)` : 'no more tensors'}, got ${name} (${data.byteLength} bytes)`);
    let done = 0;
    while (done < data.byteLength) {
      const { bytesWritten } = await this.file.write(data, done, data.byteLength - done, this.position + done);
      done += bytesWritten;
    }
    this.position += data.byteLength;
    this.index++;
  }

  get complete(): boolean {
    return this.index === this.tensors.length;
  }
}
