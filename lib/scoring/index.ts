/**
 * @mlx-bun/inference/scoring — logits and final hidden states of whole sequences, and greedy
 * decoding, on a loaded model.
 */
import { InvalidArgumentError } from '../errors.js';
import { toTokenIds } from '../models/ids.js';
import { nativeModel, type Model } from '../models/model.js';

/**
 * Float32 logits for every position of `ids` (teacher forcing), row-major [T, vocab]: row t
 * scores the token after ids[0..t].
 */
export async function forwardSequence(model: Model, ids: Int32Array | number[]): Promise<Float32Array> {
  const h = nativeModel(model);
  const x = toTokenIds(ids, model.config.vocabSize);
  return h.forward(x, true);
}

/**
 * Float32 final hidden states (after the final norm, before the LM head) for every position of
 * `ids`, row-major [T, hiddenSize]: row t times the LM head's weights gives forwardSequence's row t
 * (before any final soft-cap).
 */
export async function hiddenStates(model: Model, ids: Int32Array | number[]): Promise<Float32Array> {
  const h = nativeModel(model);
  const x = toTokenIds(ids, model.config.vocabSize);
  return h.hidden(x, 'none');
}

/**
 * Greedy continuation of `ids`: prefill, then one token at a time on the same cache; returns
 * `n` token ids (argmax at every step, first index on ties). No stop tokens: see generation.
 */
export async function greedyTokens(model: Model, ids: Int32Array | number[], n: number): Promise<number[]> {
  const h = nativeModel(model);
  const x = toTokenIds(ids, model.config.vocabSize);
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 1 << 24)
    throw new InvalidArgumentError(`n must be an integer in [0, ${1 << 24}]`, 'n');
  return Array.from(await h.greedy(x, n));
}
