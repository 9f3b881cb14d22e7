/**
 * Sampling options: the public type, their defaults and their validation. Validation happens once,
 * here, and names the offending option in a typed InvalidArgumentError (NaN, infinities, wrong
 * types, out-of-range and absurdly large values). `null` and `undefined` mean "default".
 * The chain itself runs in C++ (cpp/engine/sampler.h): logit bias -> penalties -> temperature ->
 * top-k -> top-p -> min-p -> draw.
 */
import type { NativeSamplingOptions } from '../../types/native/generation.js';
import { InvalidArgumentError } from '../errors.js';

export interface SamplingOptions {
  /** Softmax temperature; 0 = greedy (argmax). Range [0, 100]. */
  temperature?: number | null;
  /** Keep the k most likely tokens; 0 = off. Integer in [0, 1_000_000]. */
  topK?: number | null;
  /** Keep the smallest most-likely set whose probability reaches p. Range (0, 1]; 1 = off. */
  topP?: number | null;
  /** Drop tokens less likely than minP x the most likely one. Range [0, 1]; 0 = off. */
  minP?: number | null;
  /** Divide positive / multiply negative logits of recent tokens. Range (0, 100]; 1 = off. */
  repetitionPenalty?: number | null;
  /** How many recent tokens (prompt included) the penalties look at. Integer in [0, 1_000_000]; default 64. */
  repetitionContextSize?: number | null;
  /** Subtracted once from the logit of every token in the window. Range [-2, 2]. */
  presencePenalty?: number | null;
  /** Subtracted per occurrence in the window. Range [-2, 2]. */
  frequencyPenalty?: number | null;
  /** Added to the logits of the given token ids. Values in [-100, 100]. */
  logitBias?: Readonly<Record<number, number>> | ReadonlyMap<number, number> | null;
  /** Random seed: the same seed and options give the same tokens. Integer in [0, 2^53). */
  seed?: number | null;
  /** Report the log-probability of each generated token. */
  logprobs?: boolean | null;
  /** Also report this many most likely alternatives per token. Integer in [0, 20]. */
  topLogprobs?: number | null;
}

/** Options after validation, in the form the native sampler reads. */
export interface ResolvedSampling extends NativeSamplingOptions {
  logprobs: boolean;
}

export const SAMPLING_OPTION_NAMES = [
  'temperature', 'topK', 'topP', 'minP', 'repetitionPenalty', 'repetitionContextSize',
  'presencePenalty', 'frequencyPenalty', 'logitBias', 'seed', 'logprobs', 'topLogprobs',
] as const;

const MAX_SEED = 2 ** 53 - 1;

function describe(v: unknown): string {
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return JSON.stringify(v.length > 20 ? v.slice(0, 20) + '...' : v);
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v;
}

/** A finite number in [lo, hi] (bounds open when the flags say so), or undefined for null/undefined. */
export function numberOption(
  name: string, v: unknown, lo: number, hi: number,
  opts: { integer?: boolean; loOpen?: boolean } = {},
): number | undefined {
  if (v === undefined || v === null) return undefined;
  const range = `${opts.loOpen ? '(' : '['}${lo}, ${hi}]`;
  const what = opts.integer ? `an integer in ${range}` : `a number in ${range}`;
  if (typeof v !== 'number' || !Number.isFinite(v) || (opts.integer && !Number.isInteger(v)) ||
      v > hi || v < lo || (opts.loOpen && v === lo)) {
    throw new InvalidArgumentError(`${name} must be ${what}, got ${describe(v)}`, name);
  }
  return v;
}

export function booleanOption(name: string, v: unknown): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw new InvalidArgumentError(`${name} must be a boolean, got ${describe(v)}`, name);
  return v;
}

function logitBiasOption(v: unknown, vocabSize?: number): Array<[number, number]> | undefined {
  if (v === undefined || v === null) return undefined;
  let entries: Array<[unknown, unknown]>;
  if (v instanceof Map) entries = [...v.entries()];
  else if (typeof v === 'object' && !Array.isArray(v)) entries = Object.entries(v);
  else throw new InvalidArgumentError(`logitBias must be an object or Map of tokenId -> bias, got ${describe(v)}`, 'logitBias');
  if (entries.length > 1_000_000) throw new InvalidArgumentError('logitBias has too many entries', 'logitBias');
  return entries.map(([k, b]) => {
    const id = typeof k === 'string' && /^\d+$/.test(k) ? Number(k) : k;
    const maxId = vocabSize !== undefined ? vocabSize - 1 : 2 ** 31 - 1;
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > maxId) {
      throw new InvalidArgumentError(`logitBias key ${describe(k)} must be a token id in [0, ${maxId}]`, 'logitBias');
    }
    if (typeof b !== 'number' || !Number.isFinite(b) || b < -100 || b > 100) {
      throw new InvalidArgumentError(`logitBias[${id}] must be a number in [-100, 100], got ${describe(b)}`, 'logitBias');
    }
    return [id, b];
  });
}

/**
 * Validates sampling options (unknown keys are not checked here; see generate's validation).
 * `defaults` (e.g. from generation_config.json) fill options the caller left out.
 */
export function resolveSampling(options: SamplingOptions | null | undefined, vocabSize?: number, defaults: SamplingOptions = {}): ResolvedSampling {
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    throw new InvalidArgumentError(`sampling options must be an object, got ${describe(options)}`, 'options');
  }
  const o: SamplingOptions = options ?? {};
  const pick = <K extends keyof SamplingOptions>(k: K): SamplingOptions[K] => (o[k] ?? defaults[k]);
  const out: ResolvedSampling = { logprobs: booleanOption('logprobs', pick('logprobs')) ?? false };
  const set = <K extends keyof NativeSamplingOptions>(k: K, v: NativeSamplingOptions[K] | undefined) => {
    if (v !== undefined) (out as NativeSamplingOptions)[k] = v;
  };
  set('temperature', numberOption('temperature', pick('temperature'), 0, 100));
  set('topK', numberOption('topK', pick('topK'), 0, 1_000_000, { integer: true }));
  set('topP', numberOption('topP', pick('topP'), 0, 1, { loOpen: true }));
  set('minP', numberOption('minP', pick('minP'), 0, 1));
  set('repetitionPenalty', numberOption('repetitionPenalty', pick('repetitionPenalty'), 0, 100, { loOpen: true }));
  set('repetitionContextSize', numberOption('repetitionContextSize', pick('repetitionContextSize'), 0, 1_000_000, { integer: true }));
  set('presencePenalty', numberOption('presencePenalty', pick('presencePenalty'), -2, 2));
  set('frequencyPenalty', numberOption('frequencyPenalty', pick('frequencyPenalty'), -2, 2));
  set('logitBias', logitBiasOption(pick('logitBias'), vocabSize));
  set('seed', numberOption('seed', pick('seed'), 0, MAX_SEED, { integer: true }));
  set('topLogprobs', numberOption('topLogprobs', pick('topLogprobs'), 0, 20, { integer: true }));
  if (out.topLogprobs !== undefined && out.topLogprobs > 0) out.logprobs = true;
  if (vocabSize !== undefined && out.topLogprobs !== undefined && out.topLogprobs > vocabSize) out.topLogprobs = vocabSize;
  return out;
}
