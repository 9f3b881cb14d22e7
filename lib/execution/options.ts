/**
 * createInferenceEngine() options: validated once here (typed errors naming the option), then
 * turned into the plain numbers the native engine reads.
 */
import type { NativeEngineOptions } from '../../types/native/engine.js';
import { InvalidArgumentError } from '../errors.js';
import { booleanOption, numberOption } from '../sampling/options.js';

export interface InferenceEngineOptions {
  /** Rows (requests) advanced together in one step. Integer in [1, 4096]; default 16. */
  maxRows?: number | null;
  /** Requests waiting for a row; beyond it generate() throws BusyError. Integer in [0, 2^24]; default 256. */
  maxQueue?: number | null;
  /** Tokens per KV block. Integer in [1, 4096]; default 16. */
  blockSize?: number | null;
  /** KV pool size in blocks (exclusive with kvBytes). Default: room for maxRows rows of up to 2048 tokens, at most 2 GiB. */
  kvBlocks?: number | null;
  /** KV pool size in bytes (exclusive with kvBlocks). */
  kvBytes?: number | null;
  /** Most prompt tokens of one row per step (a long prompt is prefilled in chunks between decode steps). Default 256. */
  prefillChunk?: number | null;
  /** Most prefill tokens of all rows per step (at least one chunk). Default prefillChunk. */
  prefillBudget?: number | null;
  /** Reuse KV of shared prompt prefixes (full blocks). Default true. */
  prefixCache?: boolean | null;
  /** RAM budget for KV blocks kept only for reuse. Default: the whole pool. */
  prefixCacheBytes?: number | null;
  /** Most tokens (prompt + generated) of one request. Default: the model's context, clamped to the pool. */
  maxContext?: number | null;
  /**
   * Every request's logits equal those it gets alone, whatever runs beside it. Always true on the
   * CPU; on CUDA this option selects M-independent kernels (slower: see the README). Default false.
   */
  batchInvariant?: boolean | null;
  /**
   * Greedy requests (no penalties, bias or logprobs) take the argmax on the device instead of copying logits, and on a
   * device model the other requests without logprobs are sampled there too (only token ids come back). Default true.
   */
  deviceArgmax?: boolean | null;
}

export const ENGINE_OPTION_NAMES = [
  'maxRows', 'maxQueue', 'blockSize', 'kvBlocks', 'kvBytes', 'prefillChunk', 'prefillBudget',
  'prefixCache', 'prefixCacheBytes', 'maxContext', 'batchInvariant', 'deviceArgmax',
] as const;

const DEFAULT_POOL_BYTES = 2 ** 31;

/** `bytesPerBlock` is 0 for models without KV state. `modelContext` 0 = unknown. */
export function resolveEngineOptions(
  options: unknown, bytesPerBlock: number, modelContext: number,
): Omit<NativeEngineOptions, 'fingerprint'> {
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    throw new InvalidArgumentError('options must be an object', 'options');
  }
  const o = (options ?? {}) as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!(ENGINE_OPTION_NAMES as readonly string[]).includes(k)) throw new InvalidArgumentError(`unknown option '${k}'`, k);
  }
  const int = (name: string, lo: number, hi: number) => numberOption(name, o[name], lo, hi, { integer: true });
  const maxRows = int('maxRows', 1, 4096) ?? 16;
  const maxQueue = int('maxQueue', 0, 2 ** 24) ?? 256;
  const blockSize = int('blockSize', 1, 4096) ?? 16;
  const prefillChunk = int('prefillChunk', 1, 2 ** 20) ?? 256;
  const prefillBudget = Math.max(int('prefillBudget', 1, 2 ** 22) ?? prefillChunk, prefillChunk);
  const prefixCache = booleanOption('prefixCache', o.prefixCache) ?? true;
  const batchInvariant = booleanOption('batchInvariant', o.batchInvariant) ?? false;
  const deviceArgmax = booleanOption('deviceArgmax', o.deviceArgmax) ?? true;
  const kvBlocksOpt = int('kvBlocks', 1, 2 ** 24);
  const kvBytesOpt = numberOption('kvBytes', o.kvBytes, 1, 2 ** 50, { integer: true });
  const cacheBytes = numberOption('prefixCacheBytes', o.prefixCacheBytes, 0, 2 ** 50, { integer: true });
  if (kvBlocksOpt !== undefined && kvBytesOpt !== undefined) {
    throw new InvalidArgumentError('give kvBlocks or kvBytes, not both', 'kvBytes');
  }
  // A larger maxContext than the model's is allowed: rope scaling (dynamic, yarn) exists for it.
  let maxContext = int('maxContext', 2, 2 ** 30) ?? (modelContext > 1 ? modelContext : 4096);
  let kvBlocks: number;
  if (kvBlocksOpt !== undefined) kvBlocks = kvBlocksOpt;
  else if (kvBytesOpt !== undefined) {
    kvBlocks = bytesPerBlock > 0 ? Math.floor(kvBytesOpt / bytesPerBlock) : Math.ceil(maxContext / blockSize) * maxRows;
    if (kvBlocks < 1) throw new InvalidArgumentError(`kvBytes ${kvBytesOpt} is less than one KV block (${bytesPerBlock} bytes)`, 'kvBytes');
  } else {
    const tokens = Math.max(maxContext, maxRows * Math.min(maxContext, 2048));
    kvBlocks = Math.ceil(tokens / blockSize);
    if (bytesPerBlock > 0) kvBlocks = Math.max(1, Math.min(kvBlocks, Math.floor(DEFAULT_POOL_BYTES / bytesPerBlock)));
  }
  kvBlocks = Math.min(kvBlocks, 2 ** 24);
  // One request alone must always be able to finish: its context never exceeds the pool.
  maxContext = Math.min(maxContext, kvBlocks * blockSize);
  if (maxContext < 2) throw new InvalidArgumentError('the KV pool must hold at least 2 tokens', kvBytesOpt !== undefined ? 'kvBytes' : 'kvBlocks');
  let prefixCacheBlocks = 0;
  if (prefixCache) {
    prefixCacheBlocks = cacheBytes === undefined || bytesPerBlock === 0 ? kvBlocks : Math.min(kvBlocks, Math.floor(cacheBytes / bytesPerBlock));
  }
  return {
    maxRows, maxQueue, blockSize, kvBlocks, prefixCacheBlocks, prefillChunk, prefillBudget, maxContext, batchInvariant, deviceArgmax,
  };
}
