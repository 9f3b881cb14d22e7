// Exports of cpp/addon/model.cc (the models area): loading a checkpoint, forward passes on a fresh
// cache, greedy decoding, and sessions holding one sequence's KV caches for incremental decoding.

import type { NativeModelConfig as NativeCheckpointConfig } from './artifacts.js';

/**
 * Hyperparameters of a loaded model: the checkpoint config as the native loader read it (any
 * dialect; see artifacts.d.ts), with torchDtype '' when config.json names none and `quantized`.
 */
export interface NativeModelConfig extends Omit<NativeCheckpointConfig, 'torchDtype'> {
  /** torch_dtype / dtype of config.json ('' when absent). */
  torchDtype: string;
  quantized: boolean;
}

export interface NativeModelInfo {
  device: 'cpu' | 'cuda';
  weightBytes: number;
  slidingWindow: boolean;
  logitSoftcap: boolean;
}

export interface NativeLoadOptions {
  device: 'cpu' | 'cuda';
  dtype: 'float32' | 'bfloat16' | 'float16' | 'auto';
}

/**
 * One sequence's KV caches. `forward` appends `ids` at positions length()..length()+T-1 and
 * resolves to float32 logits, [T, vocab] row-major when allRows, else [1, vocab] (last token).
 * One forward at a time per session (a second call while one runs throws BusyError); a forward
 * that fails leaves the session in an undefined state: reset() it. Every call after dispose()
 * throws InvalidArgumentError; so does any call once the model is disposed.
 */
export interface NativeSession {
  forward(ids: Int32Array, allRows: boolean): Promise<Float32Array>;
  /** Tokens held (the position the next forward starts at). */
  length(): number;
  reset(): void;
  /**
   * Keeps the first `length` tokens (0 <= length <= length()), e.g. to roll back rejected draft
   * tokens. UnsupportedError for sliding-window caches (the session is left as it was).
   */
  truncate(length: number): void;
  /** Keys and values of the tokens held: per layer [kvHeads, length, headDim] in `dtype`, as bytes. */
  saveState(): Promise<NativeSessionState>;
  /** Replaces the caches with saveState()'s form (bytes checked; a refusal leaves the session empty). */
  loadState(layers: Array<{ k: Uint8Array; v: Uint8Array }>, length: number, dtype: string): void;
  dispose(): void;
}

export interface NativeSessionState {
  length: number;
  dtype: 'float32' | 'bfloat16' | 'float16';
  kvHeads: number;
  headDim: number;
  layers: Array<{ k: ArrayBuffer; v: ArrayBuffer }>;
}

export interface NativeModel {
  config(): NativeModelConfig;
  info(): NativeModelInfo;
  /** Logits of `ids` on a fresh cache: [T, vocab] when allRows, else [1, vocab]. */
  forward(ids: Int32Array, allRows: boolean): Promise<Float32Array>;
  /**
   * Final hidden states of `ids` (after the final norm, before the LM head) on a fresh cache:
   * 'last' -> [hidden] of the last token, 'mean' -> [hidden] averaged over the tokens, 'none' ->
   * [T, hidden] row-major.
   */
  hidden(ids: Int32Array, pooling: 'last' | 'mean' | 'none'): Promise<Float32Array>;
  /** Greedy continuation: prefill, then one token at a time on the same caches; n tokens. */
  greedy(ids: Int32Array, n: number): Promise<Int32Array>;
  /** A session whose caches hold at most maxTokens tokens. */
  createSession(maxTokens: number): NativeSession;
  /** Frees the weights once running work finishes; later calls throw InvalidArgumentError. */
  dispose(): void;
}

export interface NativeModels {
  /** Loads on a worker thread; onProgress(fraction, phase) is called on the JS thread. */
  loadModel(dir: string, options: NativeLoadOptions, onProgress?: (fraction: number, phase: string) => void): Promise<NativeModel>;
}
