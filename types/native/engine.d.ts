// Exports of cpp/addon/engine.cc (the execution area): the continuous-batching engine thread over
// a paged KV pool, fed by submit() and reporting each step's events through one callback call.
import type { NativeSamplingOptions } from './generation.js';

/** Options as the addon reads them (validated and defaulted by lib/execution). */
export interface NativeEngineOptions {
  maxRows: number;
  maxQueue: number;
  blockSize: number;
  kvBlocks: number;
  /** Unreferenced KV blocks kept for prefix reuse; 0 turns the prefix cache off. */
  prefixCacheBlocks: number;
  prefillChunk: number;
  prefillBudget: number;
  /** Most tokens (prompt + generated) of one sequence. */
  maxContext: number;
  /** Model identity mixed into prefix-cache keys. */
  fingerprint: string;
  /** M-independent kernels so each row's logits do not depend on the batch (CUDA; the CPU always is). */
  batchInvariant: boolean;
  /** Plain greedy rows take the argmax on the model's device, and on a device model rows without logprobs are sampled there (only token ids come back); false: host sampling. */
  deviceArgmax: boolean;
}

/** One request's news from one step. */
export interface NativeEngineEvent {
  id: number;
  /** The sampled token, or -1 when the request ended without one (abort, error). */
  token: number;
  logprob?: number;
  topTokens?: Int32Array;
  topLogprobs?: Float32Array;
  /** Tokens sampled so far for this request. */
  generated: number;
  /** Present on the request's last event. */
  finish?: 'stop' | 'length' | 'abort' | 'error';
  promptTokens?: number;
  /** Prompt tokens whose KV came from the prefix cache (first admission). */
  cachedTokens?: number;
  error?: string;
}

export interface NativeEngineStats {
  running: number;
  waiting: number;
  blocksTotal: number;
  blocksUsed: number;
  blocksFree: number;
  blocksCached: number;
  steps: number;
  stepsAhead: number;
  generatedTokens: number;
  prefillTokens: number;
  cachedTokens: number;
  preemptions: number;
  tokensPerSecond: number;
  msSinceProgress: number;
  kvBytes: number;
  closed: boolean;
}

export interface NativeEngine {
  /** Queues a request (BusyError when the queue is full, AbortError once closed). */
  submit(id: number, prompt: Int32Array, maxTokens: number, stopTokens: Int32Array,
    sampling: NativeSamplingOptions | undefined, adapter: string): void;
  /** The request ends with 'abort' at the next step; no-op once it ended. */
  cancel(id: number): void;
  stats(): NativeEngineStats;
  /** Stops accepting; abort ends every request now, otherwise they finish first. The last onEvents call has last = true. */
  close(abort: boolean): void;
}

export interface NativeExecution {
  InferenceEngine: new (model: object, options: NativeEngineOptions,
    onEvents: (events: NativeEngineEvent[], last: boolean) => void) => NativeEngine;
  /** KV bytes of one block (all layers, K and V; 0 for a model without KV) and the model's max_position_embeddings (0 = unknown). */
  engineModelFacts(model: object, blockSize: number): { bytesPerBlock: number; maxPositions: number };
}
