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
import type { CheckpointInfo, FileDType, ModelConfig, TensorData, TensorSummary, WeightsInfo } from './types.js';

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

/** The floating-point dtype holding most bytes (the working dtype), else the dtype holding most. */
function dominantDtype(tensors: readonly TensorSummary[]): FileDType | null {
  const bytes = new Map<FileDType, number>();
  for (const t of tensors) bytes.set(t.dtype, (bytes.get(t.dtype) ?? 0) + t.nbytes);
  let best: FileDType | null = null;
  let bestScore = -1;
  for (const [d, n] of bytes) {
    const score = (FLOAT_DTYPES.has(d) ? Number.MAX_SAFE_INTEGER / 2 : 0) + n;
    if (score > bestScore) { bestScore = score; best = d; }
  }
  return best;
}

/**
 * Opens a .safetensors file or a model directory (sharded index, model.safetensors, or a single
 * .safetensors file) and validates every header; needs no config.json. No tensor data is read.
 */
export async function inspectWeights(path: string): Promise<WeightsInfo> {
  const w = await native().inspectWeights(checkPath(path, 'path'));
  const shards = w.files.map((f) => basename(f));
  const tensors: TensorSummary[] = w.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes, shard: shards[t.file] ?? '' }));
  return { tensors, totalBytes: w.totalBytes, dtype: dominantDtype(tensors), shards, metadata: w.metadata };
}

/**
 * inspectWeights plus `dir`/config.json, and the logical parameter count (MLX-packed weights
 * counted unpacked, their scales and biases not at all).
 */
export async function inspectCheckpoint(dir: string): Promise<CheckpointInfo> {
  checkPath(dir, 'dir');
  const [config, weights] = await Promise.all([readConfig(dir), inspectWeights(dir)]);
  const names = new Set(weights.tensors.map((t) => t.name));
  let parameterCount = 0;
  for (const t of weights.tensors) {
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
  }
  return { config, ...weights, parameterCount };
}

/** One tensor's raw little-endian bytes (dtypes F32, F16, BF16, I32, U32, U8, I8). */
export async function readTensor(path: string, name: string): Promise<TensorData> {
  checkPath(path, 'path');
  if (typeof name !== 'string') throw new InvalidArgumentError('name must be a string', 'name');
  const t = await native().readTensor(path, name);
  return { dtype: t.dtype, shape: t.shape, data: new Uint8Array(t.data) };
}
