/**
 * The saved-session file: a session's token ids and every layer's keys and values, so a long
 * prompt's KV can be computed once and read back in a later process.
 *
 *   8 bytes   magic "MLXBSES1"
 *   4 bytes   header length H (uint32, little-endian)
 *   H bytes   header (UTF-8 JSON): format version, the model's identity, token ids, KV layout,
 *             byte count and SHA-256 of the data
 *   data      per layer: keys then values, [kvHeads, length, headDim] in the KV dtype
 *
 * Written to a temporary file beside the target and renamed over it, so a failed or interrupted
 * save never leaves a half-written file under the name. Read back with every field checked: a
 * damaged file is an InvalidFileError, one saved for another model an InvalidArgumentError.
 * The model's identity is its configuration and weight size, not a hash of its weights: a
 * checkpoint whose weights were replaced in place is not recognised as different.
 */
import { createHash, randomBytes } from 'node:crypto';
import { open, readFile, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

import type { NativeSessionState } from '../../types/native/models.js';
import { InvalidArgumentError, InvalidFileError, IoError } from '../errors.js';
import type { Model } from '../models/model.js';

const MAGIC = Buffer.from('MLXBSES1', 'latin1');
const VERSION = 1;
const MAX_HEADER = 64 * 1024 * 1024;

export interface SavedHeader {
  format: 'mlx-bun-session';
  version: number;
  model: Record<string, string | number>;
  tokens: number[];
  length: number;
  dtype: NativeSessionState['dtype'];
  kvHeads: number;
  headDim: number;
  layers: number;
  dataBytes: number;
  sha256: string;
}

/** What identifies a model for a saved state: architecture, vocabulary, weight bytes, device. */
export function modelIdentity(model: Model): Record<string, string | number> {
  const c = model.config;
  return {
    modelType: c.modelType, numLayers: c.numLayers, hiddenSize: c.hiddenSize, numHeads: c.numHeads,
    numKvHeads: c.numKvHeads, headDim: c.headDim, vocabSize: c.vocabSize, weightBytes: model.weightBytes,
    device: model.device,
  };
}

export async function writeSaved(path: string, model: Model, tokens: readonly number[], st: NativeSessionState): Promise<void> {
  const hash = createHash('sha256');
  let dataBytes = 0;
  const chunks: Buffer[] = [];
  for (const l of st.layers) {
    for (const b of [l.k, l.v]) {
      const buf = Buffer.from(b);
      hash.update(buf);
      dataBytes += buf.length;
      chunks.push(buf);
    }
  }
  const header: SavedHeader = {
    format: 'mlx-bun-session', version: VERSION, model: modelIdentity(model), tokens: [...tokens],
    length: st.length, dtype: st.dtype, kvHeads: st.kvHeads, headDim: st.headDim, layers: st.layers.length,
    dataBytes, sha256: hash.digest('hex'),
  };
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.length);
  const tmp = join(dirname(path), `.${basename(path)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  let fh;
  try {
    fh = await open(tmp, 'wx');
    await fh.writev([MAGIC, len, json, ...chunks]);
    await fh.sync();
    await fh.close();
    fh = undefined;
    await rename(tmp, path);
  } catch (e) {
    await fh?.close().catch(() => {});
    await unlink(tmp).catch(() => {});
    throw new IoError(`cannot save the session to ${path}: ${(e as Error).message}`, 'path');
  }
}

const bad = (path: string, what: string) => new InvalidFileError(`${path}: not a usable saved session (${what})`, 'path');

export interface SavedState {
  header: SavedHeader;
  /** Per layer keys and values, views into the file's bytes. */
  layers: Array<{ k: Uint8Array; v: Uint8Array }>;
}

export async function readSaved(path: string, model: Model): Promise<SavedState> {
  let buf: Buffer;
  try {
    buf = await readFile(path);
  } catch (e) {
    throw new IoError(`cannot read ${path}: ${(e as Error).message}`, 'path');
  }
  if (buf.length < 12 || !buf.subarray(0, 8).equals(MAGIC)) throw bad(path, 'no session header');
  const hlen = buf.readUInt32LE(8);
  if (hlen > MAX_HEADER || 12 + hlen > buf.length) throw bad(path, 'truncated header');
  let h: SavedHeader;
  try {
    h = JSON.parse(buf.subarray(12, 12 + hlen).toString('utf8')) as SavedHeader;
  } catch {
    throw bad(path, 'header is not JSON');
  }
  const int = (v: unknown, lo: number) => typeof v === 'number' && Number.isInteger(v) && v >= lo;
  if (h === null || typeof h !== 'object' || h.format !== 'mlx-bun-session') throw bad(path, 'not a session file');
  if (h.version !== VERSION) throw bad(path, `format version ${String(h.version)}; this library reads ${VERSION}`);
  if (!int(h.length, 0) || !int(h.kvHeads, 1) || !int(h.headDim, 1) || !int(h.layers, 0) || !int(h.dataBytes, 0) ||
      !Array.isArray(h.tokens) || h.tokens.length !== h.length || !['float32', 'bfloat16', 'float16'].includes(h.dtype) ||
      typeof h.sha256 !== 'string' || h.model === null || typeof h.model !== 'object')
    throw bad(path, 'malformed header');
  const vocab = model.config.vocabSize;
  if (!h.tokens.every((t) => int(t, 0) && t < vocab)) throw bad(path, 'token ids outside the vocabulary');
  const want = modelIdentity(model);
  const diff = Object.keys(want).filter((k) => h.model[k] !== want[k]);
  if (diff.length > 0)
    throw new InvalidArgumentError(`${path} was saved for another model (${diff.map((k) => `${k} ${String(h.model[k])} vs ${String(want[k])}`).join(', ')})`, 'path');
  const per = h.kvHeads * h.length * h.headDim * (h.dtype === 'float32' ? 4 : 2);
  if (h.dataBytes !== 2 * per * h.layers || buf.length !== 12 + hlen + h.dataBytes) throw bad(path, 'data size does not match the header');
  const data = buf.subarray(12 + hlen);
  if (createHash('sha256').update(data).digest('hex') !== h.sha256) throw bad(path, 'data checksum mismatch');
  const layers: Array<{ k: Uint8Array; v: Uint8Array }> = [];
  for (let i = 0; i < h.layers; i++) {
    const at = 2 * per * i;
    layers.push({ k: data.subarray(at, at + per), v: data.subarray(at + per, at + 2 * per) });
  }
  return { header: h, layers };
}
