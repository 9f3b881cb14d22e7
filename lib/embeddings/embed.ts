/**
 * Pooled text embeddings from a loaded decoder: the final hidden states (after the final norm,
 * before the LM head) of one input, pooled to one vector, optionally cut to its first
 * `dimensions` components and L2-normalised. Decoder embedding checkpoints (Qwen3-Embedding and
 * the like) are trained for last-token pooling at a terminator their tokenizer's post-processor
 * appends; that is the default here.
 */
import { AbortError, InvalidArgumentError } from '../errors.js';
import type { Tokenizer } from '../input/tokenizer.js';
import { toTokenIds } from '../models/ids.js';
import { nativeModel, type Model } from '../models/model.js';

/** 'last': the last token's state; 'mean': the average over the tokens; 'cls': the first token's. */
export type Pooling = 'last' | 'mean' | 'cls';
export const POOLINGS: readonly Pooling[] = ['last', 'mean', 'cls'];

/** What embeds: a LanguageModel, or any object with a loaded model and (for text) its tokenizer. */
export interface EmbeddingTarget {
  readonly model: Model;
  readonly tokenizer?: Tokenizer;
}

/** Text (needs the target's tokenizer) or token ids as they are. */
export type EmbeddingInput = string | readonly number[] | Int32Array;

export interface EmbedOptions {
  /** Default 'last'. */
  pooling?: Pooling;
  /** L2-normalise the result (after `dimensions`). Default true. */
  normalize?: boolean;
  /** Keep only the first N components (models trained for truncation). Default: all. */
  dimensions?: number;
  /** Text put before every string input (an instruction or a sentence-transformers prompt). */
  prompt?: string;
  /**
   * Append the tokenizer post-processor's suffix (Tokenizer.sequenceSuffix) to string inputs that
   * do not already end with it. Default true. Token-id inputs are used as given.
   */
  appendSuffix?: boolean;
  /** Stops before the next input; the promise rejects with AbortError. */
  signal?: AbortSignal;
}

export interface Embedding {
  embedding: Float32Array;
  /** Tokens the model read for this input. */
  tokens: number;
}

/** The query form instruction-aware embedding models are trained with. */
export function withInstruction(instruction: string, text: string): string {
  if (typeof instruction !== 'string') throw new InvalidArgumentError('instruction must be a string', 'instruction');
  if (typeof text !== 'string') throw new InvalidArgumentError('text must be a string', 'text');
  return `Instruct: ${instruction}\nQuery:${text}`;
}

interface Checked {
  pooling: Pooling;
  normalize: boolean;
  dimensions?: number;
  prompt: string;
  appendSuffix: boolean;
  signal?: AbortSignal;
}

const KEYS = ['pooling', 'normalize', 'dimensions', 'prompt', 'appendSuffix', 'signal'];

function checkOptions(options: unknown, hidden: number): Checked {
  if (options === undefined) return { pooling: 'last', normalize: true, prompt: '', appendSuffix: true };
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object', 'options');
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) if (!KEYS.includes(key)) throw new InvalidArgumentError(`unknown option '${key}'`, key);
  if (o.pooling !== undefined && !POOLINGS.includes(o.pooling as Pooling))
    throw new InvalidArgumentError(`pooling must be one of ${POOLINGS.join(', ')}; got ${String(o.pooling)}`, 'pooling');
  for (const key of ['normalize', 'appendSuffix'])
    if (o[key] !== undefined && typeof o[key] !== 'boolean') throw new InvalidArgumentError(`${key} must be a boolean`, key);
  if (o.dimensions !== undefined) {
    const d = o.dimensions;
    if (typeof d !== 'number' || !Number.isInteger(d) || d < 1 || d > hidden)
      throw new InvalidArgumentError(`dimensions must be an integer in [1, ${hidden}] (the model's hidden size); got ${String(d)}`, 'dimensions');
  }
  if (o.prompt !== undefined && typeof o.prompt !== 'string') throw new InvalidArgumentError('prompt must be a string', 'prompt');
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new InvalidArgumentError('signal must be an AbortSignal', 'signal');
  const c: Checked = {
    pooling: (o.pooling as Pooling | undefined) ?? 'last',
    normalize: (o.normalize as boolean | undefined) ?? true,
    prompt: (o.prompt as string | undefined) ?? '',
    appendSuffix: (o.appendSuffix as boolean | undefined) ?? true,
  };
  if (o.dimensions !== undefined) c.dimensions = o.dimensions as number;
  if (o.signal !== undefined) c.signal = o.signal as AbortSignal;
  return c;
}

function tokenize(target: EmbeddingTarget, input: EmbeddingInput, o: Checked, what: string): Int32Array {
  const vocab = target.model.config.vocabSize;
  let ids: number[] | Int32Array;
  if (typeof input !== 'string') {
    ids = toTokenIds(input as Int32Array | number[], vocab, 'input');
  } else {
    const tok = target.tokenizer;
    if (!tok) throw new InvalidArgumentError(`${what} is text, but the model has no tokenizer: pass token ids`, 'input');
    const enc = tok.encode(o.prompt + input);
    const suffix = tok.sequenceSuffix;
    if (o.appendSuffix && suffix.length > 0) {
      const has = enc.length >= suffix.length && suffix.every((id, i) => enc[enc.length - suffix.length + i] === id);
      if (!has) enc.push(...suffix);
    }
    if (enc.length === 0) throw new InvalidArgumentError(`${what} is empty: it gives no tokens`, 'input');
    ids = toTokenIds(enc, vocab, 'input');
  }
  // Dynamic NTK rope rescales itself past maxPositionEmbeddings (that is what it is for), so only
  // the other rope types take it as the context.
  const c = target.model.config;
  const max = c.rope.type === 'dynamic' ? 0 : c.maxPositionEmbeddings;
  if (max > 0 && ids.length > max)
    throw new InvalidArgumentError(`${what} has ${ids.length} tokens; the model's context is ${max} tokens`, 'input');
  return ids;
}

function finish(v: Float32Array, o: Checked): Float32Array {
  const out = o.dimensions !== undefined && o.dimensions < v.length ? v.slice(0, o.dimensions) : v;
  if (!o.normalize) return out;
  let ss = 0;
  for (let i = 0; i < out.length; i++) ss += out[i]! * out[i]!;
  const norm = Math.sqrt(ss);
  if (norm > 0) for (let i = 0; i < out.length; i++) out[i] = out[i]! / norm;
  return out;
}

async function run(target: EmbeddingTarget, ids: Int32Array, o: Checked): Promise<Embedding> {
  if (o.signal?.aborted) throw new AbortError('embedding aborted', 'signal');
  const h = nativeModel(target.model, 'model');
  // The first token's state depends on that token alone (causal attention): run just it.
  const v = o.pooling === 'cls' ? await h.hidden(ids.subarray(0, 1), 'last') : await h.hidden(ids, o.pooling);
  return { embedding: finish(v, o), tokens: ids.length };
}

function checkTarget(target: unknown): EmbeddingTarget {
  if (target === null || typeof target !== 'object' || !('model' in target))
    throw new InvalidArgumentError('target must be a LanguageModel or { model, tokenizer? }', 'target');
  const t = target as EmbeddingTarget;
  nativeModel(t.model, 'model');
  return t;
}

/** One input's embedding. */
export async function embed(target: EmbeddingTarget, input: EmbeddingInput, options?: EmbedOptions): Promise<Embedding> {
  const t = checkTarget(target);
  const o = checkOptions(options, t.model.config.hiddenSize);
  return run(t, tokenize(t, input, o, 'input'), o);
}

/**
 * Embeddings of several inputs, in order. Every input is tokenized and checked before the first
 * runs; each then runs on its own, so a vector does not depend on the other inputs.
 */
export async function embedMany(target: EmbeddingTarget, inputs: readonly EmbeddingInput[], options?: EmbedOptions): Promise<Embedding[]> {
  const t = checkTarget(target);
  if (!Array.isArray(inputs) || inputs.length === 0) throw new InvalidArgumentError('inputs must be a non-empty array', 'input');
  const o = checkOptions(options, t.model.config.hiddenSize);
  const all = inputs.map((x, i) => tokenize(t, x, o, `input[${i}]`));
  const out: Embedding[] = [];
  for (const ids of all) out.push(await run(t, ids, o));
  return out;
}
