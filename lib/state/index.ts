/**
 * @mlx-bun/inference/state — sequence state: a KV-cache session on a loaded model for
 * incremental decoding (prefill, then a token or a chunk at a time), rolled back with truncate(),
 * saved to a file and restored in a later process.
 */
import type { NativeSession } from '../../types/native/models.js';
import { InvalidArgumentError } from '../errors.js';
import { toTokenIds } from '../models/ids.js';
import { nativeModel, type Model } from '../models/model.js';
import { readSaved, writeSaved } from './saved.js';

export interface SessionOptions {
  /** Most tokens the session will hold (prompt + generated). Default: the model's max positions. */
  maxTokens?: number;
}

/** One sequence's KV caches on a model. Dispose it (or `using`) to free the cache memory. */
export class Session implements Disposable {
  readonly model: Model;
  readonly maxTokens: number;
  #native: NativeSession | undefined;
  #tokens: number[] = [];

  constructor(model: Model, options: SessionOptions = {}) {
    const h = nativeModel(model);
    if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object', 'options');
    const max = options.maxTokens ?? model.config.maxPositionEmbeddings;
    if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > 2 ** 30)
      throw new InvalidArgumentError('maxTokens must be an integer in [1, 2^30]', 'maxTokens');
    this.model = model;
    this.maxTokens = max;
    this.#native = h.createSession(max);
  }

  #handle(): NativeSession {
    if (!this.#native) throw new InvalidArgumentError('the session was disposed', 'session');
    nativeModel(this.model);
    return this.#native;
  }

  /** Tokens held: the position the next forward starts at. */
  get length(): number {
    return this.#handle().length();
  }

  /**
   * Appends `ids` and resolves to their logits: [T, vocab] when `allRows`, else the last row.
   * One forward at a time (a second concurrent call throws BusyError).
   */
  async forward(ids: Int32Array | number[], options: { allRows?: boolean } = {}): Promise<Float32Array> {
    const h = this.#handle();
    const x = toTokenIds(ids, this.model.config.vocabSize);
    if (this.length + x.length > this.maxTokens)
      throw new InvalidArgumentError(`session holds ${this.length} tokens; ${x.length} more exceed maxTokens ${this.maxTokens}`, 'ids');
    const out = await h.forward(x, options.allRows === true);
    for (const id of x) this.#tokens.push(id);
    return out;
  }

  /** The token ids the session holds, in order (a copy). */
  get tokens(): number[] {
    this.#handle();
    return [...this.#tokens];
  }

  /**
   * Writes the session (its token ids and every layer's keys and values) to `path`, atomically:
   * a temporary file beside it, renamed over it when complete. Session.restore() reads it back.
   * UnsupportedError for models with sliding-window layers.
   */
  async save(path: string): Promise<void> {
    if (typeof path !== 'string' || path.length === 0) throw new InvalidArgumentError('path must be a non-empty string', 'path');
    const h = this.#handle();
    const tokens = [...this.#tokens];
    const st = await h.saveState();
    await writeSaved(path, this.model, tokens, st);
  }

  /**
   * A new session on `model` holding what `path` holds (Session.save's file). Its maxTokens is at
   * least the saved length. InvalidFileError for a damaged file, InvalidArgumentError for one
   * saved for another model (or with another KV dtype or device).
   */
  static async restore(model: Model, path: string, options: SessionOptions = {}): Promise<Session> {
    nativeModel(model);
    if (typeof path !== 'string' || path.length === 0) throw new InvalidArgumentError('path must be a non-empty string', 'path');
    const saved = await readSaved(path, model);
    const max = Math.max(options?.maxTokens ?? model.config.maxPositionEmbeddings, saved.header.length, 1);
    const s = new Session(model, { ...options, maxTokens: max });
    try {
      s.#handle().loadState(saved.layers, saved.header.length, saved.header.dtype);
    } catch (e) {
      s.dispose();
      throw e;
    }
    s.#tokens = [...saved.header.tokens];
    return s;
  }

  /**
   * Keeps the first `length` tokens and forgets the rest (e.g. draft tokens a target model
   * rejected). UnsupportedError for models with sliding-window layers (the session is unchanged).
   */
  truncate(length: number): void {
    const h = this.#handle();
    if (typeof length !== 'number' || !Number.isInteger(length) || length < 0 || length > h.length())
      throw new InvalidArgumentError(`length must be an integer in [0, ${h.length()}]`, 'length');
    h.truncate(length);
    this.#tokens.length = length;
  }

  /** Forgets every token (keeps the memory). */
  reset(): void {
    this.#handle().reset();
    this.#tokens = [];
  }

  dispose(): void {
    this.#native?.dispose();
    this.#native = undefined;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
