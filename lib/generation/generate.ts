/**
 * generate(): prompt in, an async stream of per-token events out, and a final result with stats.
 *
 * The prompt is tokenized here (chat messages through the template, which keeps user text from
 * becoming control tokens); then one native GenerationSequence runs the model: prefill, and one
 * async call per token that forwards the last token and samples the next in C++ on a worker
 * thread. Text comes from the streaming detokenizer; stop strings hold back text that could be
 * their beginning. Every sampled token produces exactly one event (the stop token too, with the
 * text still held back, usually ""); the events' texts concatenate to `result.text`.
 * Leaving the loop (break, throw, abort) disposes the native sequence at once.
 */
import type { NativeGenerationSequence, NativeSample } from '../../types/native/generation.js';
import { InvalidArgumentError } from '../errors.js';
import type { ChatMessage, ChatTemplate } from '../input/chat_template.js';
import { StreamingDetokenizer } from '../input/detokenizer.js';
import type { Tokenizer } from '../input/tokenizer.js';
import { native } from '../native/index.js';
import type { GenerationConfig } from './config.js';
import { grammarSource } from './constrained.js';
import { resolveGenerateOptions, type GenerateOptions, type ResolvedGenerateOptions } from './options.js';
import { StopStringFilter } from './stop.js';

/** What generate() needs of a model: the native handle plus the checkpoint's text side. */
export interface GenerationTarget {
  /** A JS object carrying a native model (the models area's handle, or createTableModel's). */
  readonly nativeHandle: object;
  readonly vocabSize: number;
  /** Needed for string and chat input and for text output. */
  readonly tokenizer?: Tokenizer;
  readonly chatTemplate?: ChatTemplate;
  readonly generationConfig?: GenerationConfig;
  /** Extra default stop ids (config.json eos). */
  readonly eosTokenIds?: readonly number[];
}

export type GenerationInput = string | readonly ChatMessage[] | readonly number[] | Int32Array;

export interface TokenLogprob {
  token: number;
  logprob: number;
}

export interface GenerationEvent {
  /** Text this token completes (may be "" while a character or a possible stop string is incomplete). */
  text: string;
  token: number;
  /** Present when `logprobs` (or `topLogprobs`) was asked for. */
  logprob?: number;
  topLogprobs?: TokenLogprob[];
}

export type FinishReason = 'stop' | 'length' | 'abort';

export interface GenerationStats {
  promptTokens: number;
  generatedTokens: number;
  /** From the call to the first sampled token (tokenizing + prefill), in milliseconds. */
  timeToFirstTokenMs: number;
  prefillTokensPerSecond: number;
  /** Tokens after the first, per second of decoding. */
  decodeTokensPerSecond: number;
  totalMs: number;
}

export interface GenerationResult extends GenerationStats {
  text: string;
  /** Every sampled token, the stop token included. */
  tokens: number[];
  finishReason: FinishReason;
  /** The stop string or token id that ended generation, when finishReason is 'stop'. */
  stoppedBy?: string | number;
}

/** A running generation: iterate it once for events; `result` settles when iteration ends. */
export class Generation implements AsyncIterable<GenerationEvent> {
  readonly result: Promise<GenerationResult>;
  #iterator: AsyncGenerator<GenerationEvent, void, undefined> | undefined;
  #started = false;

  /** @internal use generate() */
  constructor(run: (settle: (r: GenerationResult) => void, fail: (e: unknown) => void) => AsyncGenerator<GenerationEvent, void, undefined>) {
    let settle!: (r: GenerationResult) => void;
    let fail!: (e: unknown) => void;
    this.result = new Promise<GenerationResult>((res, rej) => { settle = res; fail = rej; });
    this.result.catch(() => {});  // errors reach the iterating caller; no unhandled rejection
    this.#iterator = run(settle, fail);
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerationEvent> {
    if (this.#started || !this.#iterator) throw new InvalidArgumentError('a Generation can be iterated only once', 'generation');
    this.#started = true;
    return this.#iterator;
  }

  /** Runs to the end without looking at events; resolves to the result. */
  async complete(): Promise<GenerationResult> {
    if (!this.#started) for await (const _ of this) { /* drain */ }
    return this.result;
  }

  /** Runs to the end and returns the generated text. */
  async text(): Promise<string> {
    return (await this.complete()).text;
  }
}

function encodeInput(target: GenerationTarget, input: GenerationInput, o: ResolvedGenerateOptions): number[] {
  if (typeof input === 'string') {
    if (!target.tokenizer) throw new InvalidArgumentError('this model has no tokenizer: pass token ids', 'input');
    return target.tokenizer.encode(input);
  }
  if (input instanceof Int32Array || (Array.isArray(input) && (input.length === 0 || typeof input[0] === 'number'))) {
    const ids = [...(input as ArrayLike<number>) as number[]];
    for (const id of ids) {
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= target.vocabSize) {
        throw new InvalidArgumentError(`input token ids must be integers in [0, ${target.vocabSize - 1}]`, 'input');
      }
    }
    return ids;
  }
  if (Array.isArray(input)) {
    if (!target.tokenizer) throw new InvalidArgumentError('this model has no tokenizer: pass token ids', 'input');
    if (!target.chatTemplate) throw new InvalidArgumentError('this model has no chat template: pass a string prompt', 'input');
    return target.chatTemplate.encode(target.tokenizer, input as ChatMessage[], { addGenerationPrompt: true, ...o.chat });
  }
  throw new InvalidArgumentError('input must be a string, an array of chat messages or token ids', 'input');
}

function defaultStopIds(target: GenerationTarget): number[] {
  const ids = new Set<number>(target.generationConfig?.eosTokenIds ?? []);
  for (const id of target.eosTokenIds ?? []) ids.add(id);
  if (target.tokenizer?.eosToken) ids.add(target.tokenizer.eosToken.id);
  return [...ids].filter((id) => id < target.vocabSize);
}

function event(sample: NativeSample, text: string, logprobs: boolean): GenerationEvent {
  const e: GenerationEvent = { text, token: sample.token };
  if (logprobs) {
    e.logprob = sample.logprob;
    if (sample.topTokens && sample.topLogprobs) {
      e.topLogprobs = [...sample.topTokens].map((token, i) => ({ token, logprob: sample.topLogprobs![i]! }));
    }
  }
  return e;
}

/**
 * Where a generation's sampled tokens come from: one native sequence (generate()) or a row of
 * the batching engine (lib/execution). `first` resolves to the token after the prompt, `next` to
 * the one after `token` (the last sampled one); `dispose` releases the state at once and is
 * called exactly once, whatever ends the loop.
 */
export interface TokenSource {
  first(): Promise<NativeSample>;
  next(token: number): Promise<NativeSample>;
  dispose(): void;
}

/** A validated request: options resolved, prompt encoded, stop ids decided. */
export interface PreparedGeneration {
  readonly options: ResolvedGenerateOptions;
  readonly prompt: number[];
  readonly maxTokens: number;
  readonly stopIds: ReadonlySet<number>;
  /** performance.now() when the call started (for time to first token). */
  readonly t0: number;
}

/** Validates options and encodes the input (synchronously; a bad option throws here). */
export function prepareGeneration(target: GenerationTarget, input: GenerationInput, options?: GenerateOptions): PreparedGeneration {
  if (typeof target !== 'object' || target === null || typeof target.nativeHandle !== 'object') {
    throw new InvalidArgumentError('model must be a loaded language model', 'model');
  }
  const o = resolveGenerateOptions(options, target.vocabSize, {
    sampling: target.generationConfig?.sampling,
    maxTokens: target.generationConfig?.maxNewTokens,
  });
  const t0 = performance.now();
  const prompt = encodeInput(target, input, o);
  if (prompt.length === 0) throw new InvalidArgumentError('the prompt encodes to no tokens', 'input');
  // Not capped at max_position_embeddings: rope scaling (dynamic, yarn) exists to go past it.
  const maxTokens = o.maxTokens;
  const stopIds = new Set(o.stopTokenIds ?? defaultStopIds(target));
  return { options: o, prompt, maxTokens, stopIds, t0 };
}

/**
 * Starts generating from `input` (a raw prompt string, chat messages, or token ids). Options are
 * validated synchronously: a bad option throws here, before anything runs.
 */
export function generate(target: GenerationTarget, input: GenerationInput, options?: GenerateOptions): Generation {
  const p = prepareGeneration(target, input, options);
  if (p.options.grammar) return runGeneration(target, p, grammarSource(target, p));
  const handle = target.nativeHandle;
  const vocab = native().modelVocabSize(handle);
  if (vocab !== target.vocabSize) throw new InvalidArgumentError(`model vocabulary (${vocab}) differs from vocabSize ${target.vocabSize}`, 'model');
  // Native state exists only while the stream is consumed: created by the first next(), disposed
  // when the loop ends for any reason (an unconsumed Generation holds nothing).
  let seq: NativeGenerationSequence | undefined;
  // Tokens come from the native side in bursts of up to ~BURST_MS of steps (one call each, so
  // the host's turn between tokens does not stall the device; greedy decoding on a GPU also
  // queues each step before reading the token before it). A burst ends at a stop id; tokens
  // after a stop string are computed and dropped.
  const stopIds = Int32Array.from(p.stopIds);
  let ahead: NativeSample[] = [];
  let given = 0;
  let burst = 1;
  return runGeneration(target, p, {
    first: async () => {
      seq = new (native().GenerationSequence)(handle, p.options.sampling, p.prompt.length + p.maxTokens);
      const s = await seq.prefill(Int32Array.from(p.prompt));
      given = 1;
      return s;
    },
    next: async (token) => {
      if (ahead.length === 0) {
        const t = performance.now();
        ahead = await seq!.steps(token, Math.max(1, Math.min(burst, p.maxTokens - given)), stopIds);
        const perStep = (performance.now() - t) / Math.max(1, ahead.length);
        burst = Math.max(1, Math.min(MAX_BURST, Math.floor(BURST_MS / Math.max(perStep, 0.01))));
      }
      given++;
      return ahead.shift()!;
    },
    dispose: () => seq?.dispose(),
  });
}

/** Target duration of one native call of generate() (ms), and its most steps. */
const BURST_MS = 16;
const MAX_BURST = 16;

/** The generation loop over any token source: detokenizing, stop ids and strings, abort, stats. */
export function runGeneration(target: GenerationTarget, p: PreparedGeneration, source: TokenSource): Generation {
  const { options: o, prompt, maxTokens, stopIds, t0 } = p;
  const logprobs = o.sampling.logprobs;
  return new Generation(async function* run(settle, fail) {
    const detok = target.tokenizer ? new StreamingDetokenizer(target.tokenizer, { skipSpecialTokens: o.skipSpecialTokens }) : undefined;
    const stops = new StopStringFilter(o.stop);
    const tokens: number[] = [];
    let finishReason: FinishReason = 'length';
    let stoppedBy: string | number | undefined;
    let tFirst = 0;
    let text = '';
    const signal = o.signal;
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<'abort'>((res) => {
      onAbort = () => res('abort');
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    // Waits for a native call, or for the signal (the call then finishes on its own and its
    // result is dropped; the source is already disposed by then).
    const race = async (q: Promise<NativeSample>): Promise<NativeSample | 'abort'> => {
      if (!signal) return q;
      if (signal.aborted) { q.catch(() => {}); return 'abort'; }
      const r = await Promise.race([q, aborted]);
      if (r === 'abort') q.catch(() => {});
      return r;
    };
    try {
      let sample = await race(source.first());
      tFirst = performance.now();
      while (sample !== 'abort') {
        tokens.push(sample.token);
        if (stopIds.has(sample.token)) {
          finishReason = 'stop';
          stoppedBy = sample.token;
          const rest = stops.flush(detok ? detok.flush() : '');
          text += rest;
          yield event(sample, rest, logprobs);
          break;
        }
        const piece = detok ? detok.push(sample.token) : '';
        const last = tokens.length >= maxTokens;
        let out = stops.push(piece);
        if (last && stops.stopped === undefined) out += stops.flush(detok ? detok.flush() : '');
        if (stops.stopped !== undefined) {
          finishReason = 'stop';
          stoppedBy = stops.stopped;
        }
        text += out;
        yield event(sample, out, logprobs);
        if (stops.stopped !== undefined || last) break;
        sample = await race(source.next(sample.token));
      }
    } catch (e) {
      fail(e);
      throw e;
    } finally {
      source.dispose();
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      // Ended early without a stop: the signal fired or the consumer left the loop.
      if (tokens.length < maxTokens && finishReason === 'length') finishReason = 'abort';
      const tEnd = performance.now();
      const decodeMs = tFirst > 0 ? tEnd - tFirst : 0;
      const prefillMs = tFirst > 0 ? tFirst - t0 : 0;
      settle({
        text,
        tokens,
        finishReason,
        ...(stoppedBy !== undefined ? { stoppedBy } : {}),
        promptTokens: prompt.length,
        generatedTokens: tokens.length,
        timeToFirstTokenMs: prefillMs,
        prefillTokensPerSecond: prefillMs > 0 ? (prompt.length / prefillMs) * 1000 : 0,
        decodeTokensPerSecond: decodeMs > 0 && tokens.length > 1 ? ((tokens.length - 1) / decodeMs) * 1000 : 0,
        totalMs: tEnd - t0,
      });
    }
  });
}

/** Native generation state alive in this process (for leak checks and monitoring). */
export function generationStats(): { liveSequences: number } {
  return native().generationStats();
}
