/**
 * @mlx-bun/inference/artifacts — what a checkpoint directory holds, read and validated by the
 * native loader: `readConfig` (config.json in any transformers / MLX dialect, as one typed form),
 * `inspectCheckpoint` (config + every tensor's dtype and shape, without reading tensor data) and
 * `readTensor`. Malformed input rejects with InvalidFileError / ConfigError / UnsupportedError /
 * IoError carrying `field` (tensor name, config key or file).
 */
import { basename } from 'node:path';

import { InvalidArgumentError } from '../errors.js';
import { native } from '../native/index.js';
import type { CheckpointInfo, FileDType, ModelConfig, TensorData, TensorSummary } from './types.js';

export type * from './types.js';

function checkPath(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidArgumentError(`${field} must be a non-empty string`, field);
  if (value.includes('\0')) throw new InvalidArgumentError(`${field} must not contain NUL characters`, field);
  return value;
}

/** Reads and validates `dir`/config.json. */
export async function readConfig(dir: string): Promise<ModelConfig> {
  return native().readConfig(checkPath(dir, 'dir'));
}

/** Validates config.json text already in memory. */
export function parseConfig(text: string): ModelConfig {
  if (typeof text !== 'string') throw new InvalidArgumentError('text must be a string', 'text');
  return native().parseConfig(text);
}

const FLOAT_DTYPES: ReadonlySet<FileDType> = new Set(['F32', 'F16', 'BF16', 'F64']);

/** Bits per packed weight element for an MLX-quantized module, or 0 when it is not quantized. */
function quantBits(config: ModelConfig, module: string): number {
  if (!config.quantization) return 0;
  const override = config.quantOverrides.find((o) => o.path === module);
  if (override) return override.spec ? override.spec.bits : 0;
  return config.quantization.bits;
}

/**
 * Opens `dir` (config.json plus model.safetensors, a sharded index, or a single .safetensors
 * file), validates every header and returns what it holds. No tensor data is read.
 */
export async function inspectCheckpoint(dir: string): Promise<CheckpointInfo> {
  checkPath(dir, 'dir');
  const [config, weights] = await Promise.all([native().readConfig(dir), native().inspectWeights(dir)]);
  const names = new Set(weights.tensors.map((t) => t.name));
  const shards = weights.files.map((f) => basename(f));
  const bytesByDtype = new Map<FileDType, number>();
  let parameterCount = 0;
  const tensors: TensorSummary[] = weights.tensors.map((t) => {
    bytesByDtype.set(t.dtype, (bytesByDtype.get(t.dtype) ?? 0) + t.nbytes);
    let count = t.shape.reduce((a, b) => a * b, 1);
    const module = t.name.replace(/\.(weight|scales|biases)$/, '');
    const quantized = config.quantization !== null && names.has(`${module}.scales`);
    if (quantized && t.name.endsWith('.weight') && t.dtype === 'U32') {
      const bits = quantBits(config, module);
      if (bits > 0) count = (count * 32) / bits;
    } else if (quantized && (t.name.endsWith('.scales') || t.name.endsWith('.biases'))) {
      count = 0;  // quantization metadata, not parameters
    }
    parameterCount += count;
    return { name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes, shard: shards[t.file] ?? '' };
  });
  let dtype: FileDType | null = null;
  let best = -1;
  for (const [d, bytes] of bytesByDtype) {
    const score = (FLOAT_DTYPES.has(d) ? Number.MAX_SAFE_INTEGER / 2 : 0) + bytes;
    if (score > best) { best = score; dtype = d; }
  }
  return { config, tensors, totalBytes: weights.totalBytes, dtype, parameterCount, shards, metadata: weights.metadata };
}

/** One tensor's raw little-endian bytes (dtypes F32, F16, BF16, I32, U32, U8, I8). */
export async function readTensor(path: string, name: string): Promise<TensorData> {
  checkPath(path, 'path');
  if (typeof name !== 'string') throw new InvalidArgumentError('name must be a string', 'name');
  const t = await native().readTensor(path, name);
  return { dtype: t.dtype, shape: t.shape, data: new Uint8Array(t.data) };
}
