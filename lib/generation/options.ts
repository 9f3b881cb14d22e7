/**
 * generate() options: the sampling options plus length, stops, log-probabilities, chat template
 * arguments and cancellation. Every option is validated here with a typed error naming it;
 * unknown keys are errors too (a misspelt `max_tokens` must not silently do nothing).
 */
import { InvalidArgumentError } from '../errors.js';
import type { RenderOptions } from '../input/chat_template.js';
import { checkGrammarSpec, type GrammarSpec } from '../sampling/grammar/index.js';
import { booleanOption, numberOption, resolveSampling, SAMPLING_OPTION_NAMES, type ResolvedSampling, type SamplingOptions } from '../sampling/options.js';

export interface GenerateOptions extends SamplingOptions {
  /** Most tokens to generate (the stop token included). Integer in [1, 1_048_576]; default 256. */
  maxTokens?: number | null;
  /** Generation ends before any of these strings (which are not part of the text). At most 16, each 1..1024 chars. */
  stop?: string | readonly string[] | null;
  /** Token ids that end generation. Default: generation_config.json eos_token_id, config.json eos, the tokenizer's EOS. */
  stopTokenIds?: readonly number[] | null;
  /** Chat input only: tools and template extras (e.g. `{ enable_thinking: false }`). */
  chat?: Pick<RenderOptions, 'tools' | 'extras'> | null;
  /** Drop control tokens from the streamed text (default true). */
  skipSpecialTokens?: boolean | null;
  signal?: AbortSignal | null;
  /**
   * Constrain the output to a grammar: `{ type: 'json_schema', schema }`, `{ type: 'json' }` or
   * `{ type: 'ebnf', grammar }` (xgrammar, on the host; generate() only, not the batching engine).
   */
  grammar?: GrammarSpec | null;
}

export interface ResolvedGenerateOptions {
  sampling: ResolvedSampling;
  maxTokens: number;
  stop: string[];
  stopTokenIds?: number[];
  chat: Pick<RenderOptions, 'tools' | 'extras'>;
  skipSpecialTokens: boolean;
  signal?: AbortSignal;
  grammar?: GrammarSpec;
}

const OWN = ['maxTokens', 'stop', 'stopTokenIds', 'chat', 'skipSpecialTokens', 'signal', 'grammar'] as const;
export const GENERATE_OPTION_NAMES: readonly string[] = [...SAMPLING_OPTION_NAMES, ...OWN];

export const MAX_TOKENS_LIMIT = 1_048_576;

function stopOption(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list)) throw new InvalidArgumentError('stop must be a string or an array of strings', 'stop');
  if (list.length > 16) throw new InvalidArgumentError('stop takes at most 16 strings', 'stop');
  for (const s of list) {
    if (typeof s !== 'string' || s.length === 0 || s.length > 1024) {
      throw new InvalidArgumentError('stop strings must be non-empty strings of at most 1024 characters', 'stop');
    }
  }
  return [...list] as string[];
}

function stopTokenIdsOption(v: unknown, vocabSize: number): number[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw new InvalidArgumentError('stopTokenIds must be an array of token ids', 'stopTokenIds');
  if (v.length > 1024) throw new InvalidArgumentError('stopTokenIds takes at most 1024 ids', 'stopTokenIds');
  for (const id of v) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new InvalidArgumentError(`stopTokenIds entries must be token ids in [0, ${vocabSize - 1}]`, 'stopTokenIds');
    }
  }
  return [...v] as number[];
}

function chatOption(v: unknown): Pick<RenderOptions, 'tools' | 'extras'> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new InvalidArgumentError('chat must be an object { tools?, extras? }', 'chat');
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== 'tools' && k !== 'extras') throw new InvalidArgumentError(`unknown chat option '${k}'`, 'chat');
  if (o.tools !== undefined && o.tools !== null && !Array.isArray(o.tools)) throw new InvalidArgumentError('chat.tools must be an array', 'chat');
  if (o.extras !== undefined && o.extras !== null && (typeof o.extras !== 'object' || Array.isArray(o.extras))) {
    throw new InvalidArgumentError('chat.extras must be an object', 'chat');
  }
  const out: Pick<RenderOptions, 'tools' | 'extras'> = {};
  if (Array.isArray(o.tools)) out.tools = o.tools;
  if (o.extras) out.extras = o.extras as Record<string, unknown>;
  return out;
}

export function resolveGenerateOptions(options: unknown, vocabSize: number, defaults: { sampling?: SamplingOptions; maxTokens?: number } = {}): ResolvedGenerateOptions {
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    throw new InvalidArgumentError('options must be an object', 'options');
  }
  const o = (options ?? {}) as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!GENERATE_OPTION_NAMES.includes(k)) throw new InvalidArgumentError(`unknown option '${k}'`, k);
  }
  const sampling = resolveSampling(o as SamplingOptions, vocabSize, defaults.sampling);
  const signal = o.signal;
  if (signal !== undefined && signal !== null && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal must be an AbortSignal', 'signal');
  }
  const out: ResolvedGenerateOptions = {
    sampling,
    maxTokens: numberOption('maxTokens', o.maxTokens, 1, MAX_TOKENS_LIMIT, { integer: true }) ?? defaults.maxTokens ?? 256,
    stop: stopOption(o.stop),
    chat: chatOption(o.chat),
    skipSpecialTokens: booleanOption('skipSpecialTokens', o.skipSpecialTokens) ?? true,
  };
  const ids = stopTokenIdsOption(o.stopTokenIds, vocabSize);
  if (ids) out.stopTokenIds = ids;
  if (signal) out.signal = signal as AbortSignal;
  if (o.grammar !== undefined && o.grammar !== null) out.grammar = checkGrammarSpec(o.grammar);
  return out;
}
