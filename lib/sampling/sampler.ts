/**
 * The native sampling chain on caller-supplied logits: for custom decoding loops and for tests.
 * generate() does not use this class: it samples inside the native sequence, next to the model.
 */
import type { NativeSampler } from '../../types/native/generation.js';
import { InvalidArgumentError } from '../errors.js';
import { native } from '../native/index.js';
import { resolveSampling, type SamplingOptions } from './options.js';

export interface SampledToken {
  token: number;
  /** Log-probability under the processed logits (after bias and penalties, before temperature and filters). */
  logprob: number;
  topLogprobs?: Array<{ token: number; logprob: number }>;
}

export class Sampler {
  readonly vocabSize: number;
  readonly #native: NativeSampler;

  constructor(options: SamplingOptions | null | undefined, vocabSize: number) {
    if (typeof vocabSize !== 'number' || !Number.isInteger(vocabSize) || vocabSize < 1 || vocabSize > 2 ** 31 - 1) {
      throw new InvalidArgumentError('vocabSize must be a positive integer', 'vocabSize');
    }
    this.vocabSize = vocabSize;
    // This class always reports logprobs: its callers hold the logits anyway.
    this.#native = new (native().Sampler)({ ...resolveSampling(options, vocabSize), logprobs: true }, vocabSize);
  }

  /** Logits after logit bias and penalties. */
  process(logits: Float32Array): Float32Array {
    return this.#native.process(this.#check(logits));
  }

  /** The probabilities a draw would use (zeros outside the kept set; one-hot when greedy). */
  distribution(logits: Float32Array): Float32Array {
    return this.#native.distribution(this.#check(logits));
  }

  sample(logits: Float32Array): SampledToken {
    const r = this.#native.sample(this.#check(logits));
    const out: SampledToken = { token: r.token, logprob: r.logprob };
    if (r.topTokens && r.topLogprobs) out.topLogprobs = [...r.topTokens].map((token, i) => ({ token, logprob: r.topLogprobs![i]! }));
    return out;
  }

  /** Adds tokens the model has seen to the window the penalties read. */
  accept(tokens: number | readonly number[]): void {
    const ids = typeof tokens === 'number' ? [tokens] : tokens;
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new InvalidArgumentError(`token ${id} is outside the vocabulary`, 'tokens');
    }
    this.#native.accept(Int32Array.from(ids));
  }

  #check(logits: Float32Array): Float32Array {
    if (!(logits instanceof Float32Array) || logits.length !== this.vocabSize) {
      throw new InvalidArgumentError(`logits must be a Float32Array of length ${this.vocabSize}`, 'logits');
    }
    return logits;
  }
}
