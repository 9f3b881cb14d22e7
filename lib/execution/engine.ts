/**
 * The optional execution layer: one engine serves many concurrent generations of one model by
 * continuous batching on a native thread (cpp/engine). `engine.generate()` takes the same input,
 * options and events as `generate()`; only the token source differs — a row of the engine
 * instead of a private sequence. Each engine step's tokens arrive in one callback from the
 * native thread (no polling); a row's events wait in its queue until its consumer reads them.
 */
import type { NativeSample } from '../../types/native/generation.js';
import type { NativeEngine, NativeEngineEvent, NativeEngineOptions } from '../../types/native/engine.js';
import { AbortError, InternalError, InvalidArgumentError, UnsupportedError } from '../errors.js';
import {
  prepareGeneration, runGeneration,
  type Generation, type GenerationInput, type GenerationTarget, type TokenSource,
} from '../generation/generate.js';
import type { GenerateOptions } from '../generation/options.js';
import { native } from '../native/index.js';
import { resolveEngineOptions, type InferenceEngineOptions } from './options.js';

export interface EngineStats {
  /** Requests holding a row. */
  rows: number;
  /** Requests waiting for a row. */
  queue: number;
  kvBlocks: { total: number; used: number; free: number; cached: number };
  /** Bytes of the KV pool. */
  kvBytes: number;
  /** Generated tokens per second over the last few seconds (0 when idle). */
  tokensPerSecond: number;
  generatedTokens: number;
  /** Prompt (and recomputed) tokens run through prefill. */
  prefillTokens: number;
  /** Prompt tokens served by the prefix cache. */
  cachedPromptTokens: number;
  preemptions: number;
  steps: number;
  /**
   * Steps queued before the tokens of the step ahead of them were known (pipelined decode: CUDA
   * models by default, every row greedy; MLXB_ENGINE_PIPELINE=0 turns it off, =1 also on CPU models).
   * A row that ends there loses that step's token, unseen.
   */
  stepsAhead: number;
  /** Milliseconds since the engine last finished a step (or went idle). */
  msSinceProgress: number;
  closed: boolean;
}

export interface CloseOptions {
  /** true: end every request now (their streams end with AbortError); default false: let them finish. */
  abort?: boolean;
}

/** Per-request event queue: the engine callback pushes, the generation loop pulls. */
class RowSource implements TokenSource {
  readonly #events: NativeEngineEvent[] = [];
  #waiter: { resolve: (s: NativeSample) => void; reject: (e: unknown) => void } | undefined;
  #ended = false;
  #disposed = false;
  finish: NativeEngineEvent | undefined;

  constructor(private readonly onDispose: (ended: boolean) => void) {}

  push(e: NativeEngineEvent): void {
    if (e.finish) {
      this.#ended = true;
      this.finish = e;
    }
    this.#events.push(e);
    this.#drain();
  }

  #drain(): void {
    if (!this.#waiter || this.#events.length === 0) return;
    const e = this.#events.shift()!;
    const w = this.#waiter;
    this.#waiter = undefined;
    if (e.token >= 0) {
      const s: NativeSample = { token: e.token, logprob: e.logprob ?? 0 };
      if (e.topTokens) s.topTokens = e.topTokens;
      if (e.topLogprobs) s.topLogprobs = e.topLogprobs;
      w.resolve(s);
    } else if (e.finish === 'error') {
      w.reject(new InternalError(`the engine step failed: ${e.error ?? 'unknown error'}`));
    } else {
      w.reject(new AbortError('the request was aborted by the engine (closed)'));
    }
  }

  first(): Promise<NativeSample> {
    return this.next();
  }

  next(): Promise<NativeSample> {
    if (this.#waiter) return Promise.reject(new InternalError('engine row read twice at once'));
    if (this.#ended && this.#events.length === 0) {
      return Promise.reject(new InternalError('the engine ended this request before its last token'));
    }
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
      this.#drain();
    });
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.onDispose(this.#ended);
  }
}

let engineCounter = 0;

export class InferenceEngine implements AsyncDisposable {
  readonly #target: GenerationTarget;
  readonly #native: NativeEngine;
  readonly #rows = new Map<number, RowSource>();
  readonly #closed: Promise<void>;
  readonly options: Readonly<NativeEngineOptions>;
  #nextId = 1;
  #closing = false;

  /** @internal use createInferenceEngine() */
  constructor(target: GenerationTarget, options?: InferenceEngineOptions) {
    if (typeof target !== 'object' || target === null || typeof target.nativeHandle !== 'object') {
      throw new InvalidArgumentError('model must be a loaded language model', 'model');
    }
    const b = native();
    const checked = resolveEngineOptions(options, 0, 0);  // validates; sizes need the model's facts
    const facts = b.engineModelFacts(target.nativeHandle, checked.blockSize);
    const o: NativeEngineOptions = {
      ...resolveEngineOptions(options, facts.bytesPerBlock, facts.maxPositions),
      fingerprint: `engine-${process.pid}-${++engineCounter}-vocab${target.vocabSize}`,
    };
    this.options = Object.freeze(o);
    this.#target = target;
    let resolveClosed!: () => void;
    this.#closed = new Promise<void>((res) => { resolveClosed = res; });
    // Called from the native thread's TSFN once per step; must never throw.
    this.#native = new b.InferenceEngine(target.nativeHandle, o, (events, last) => {
      for (const e of events) {
        const row = this.#rows.get(e.id);
        if (!row) continue;
        if (e.finish) this.#rows.delete(e.id);
        try {
          row.push(e);
        } catch {
          // a consumer's continuation failing is that consumer's business, not the engine's
        }
      }
      if (last) resolveClosed();
    });
  }

  /**
   * Starts a generation on the engine: same input, options, events and result as `generate()`.
   * Throws BusyError at once when the queue is full, AbortError once the engine is closing.
   */
  generate(input: GenerationInput, options?: GenerateOptions): Generation {
    if (this.#closing) throw new AbortError('the engine is closed');
    const p = prepareGeneration(this.#target, input, options);
    if (p.options.grammar) throw new UnsupportedError('the batching engine does not constrain output to a grammar: use generate()', 'grammar');
    if (p.prompt.length >= this.options.maxContext) {
      throw new InvalidArgumentError(
        `the prompt has ${p.prompt.length} tokens; this engine's context is ${this.options.maxContext} tokens`, 'input');
    }
    const maxTokens = Math.min(p.maxTokens, this.options.maxContext - p.prompt.length);
    const id = this.#nextId++;
    const row = new RowSource((ended) => {
      if (!ended) this.#native.cancel(id);
    });
    this.#native.submit(id, Int32Array.from(p.prompt), maxTokens, Int32Array.from(p.stopIds), p.options.sampling, '');
    this.#rows.set(id, row);
    return runGeneration(this.#target, { ...p, maxTokens }, row);
  }

  stats(): EngineStats {
    const s = this.#native.stats();
    return {
      rows: s.running,
      queue: s.waiting,
      kvBlocks: { total: s.blocksTotal, used: s.blocksUsed, free: s.blocksFree, cached: s.blocksCached },
      kvBytes: s.kvBytes,
      tokensPerSecond: s.tokensPerSecond,
      generatedTokens: s.generatedTokens,
      prefillTokens: s.prefillTokens,
      cachedPromptTokens: s.cachedTokens,
      preemptions: s.preemptions,
      steps: s.steps,
      stepsAhead: s.stepsAhead,
      msSinceProgress: s.msSinceProgress,
      closed: s.closed,
    };
  }

  /** Stops accepting requests; resolves once the engine thread has exited. */
  close(options?: CloseOptions): Promise<void> {
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new InvalidArgumentError('close options must be an object', 'options');
    }
    const abort = options?.abort ?? false;
    if (typeof abort !== 'boolean') throw new InvalidArgumentError('abort must be a boolean', 'abort');
    this.#closing = true;
    this.#native.close(abort);
    return this.#closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close({ abort: true });
  }
}

/** Creates an engine serving `model` (a generation target: native model, tokenizer, template). */
export function createInferenceEngine(model: GenerationTarget, options?: InferenceEngineOptions): InferenceEngine {
  return new InferenceEngine(model, options);
}
