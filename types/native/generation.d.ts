// Exports of cpp/addon/generation.cc: the sampling chain (cpp/engine/sampler.h) and one
// generation sequence (cpp/engine/sequence.h) driven one token per async call.

/** Sampling options as the addon reads them (validated beforehand by lib/sampling). */
export interface NativeSamplingOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  repetitionContextSize?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** [tokenId, bias] pairs. */
  logitBias?: Array<[number, number]>;
  /** Integer in [0, 2^53); absent = seeded from the OS. */
  seed?: number;
  /** Compute the chosen token's log-probability (a pass over the vocabulary). Default false. */
  logprobs?: boolean;
  topLogprobs?: number;
}

/** One sampled token: its id, its log-probability under the processed logits (0 unless logprobs) and, when asked, the best alternatives. */
export interface NativeSample {
  token: number;
  logprob: number;
  topTokens?: Int32Array;
  topLogprobs?: Float32Array;
}

export interface NativeSampler {
  /** Logits after logit bias and penalties (a copy). */
  process(logits: Float32Array): Float32Array;
  /** The probabilities the draw would use (zeros outside the kept set; greedy: one-hot). */
  distribution(logits: Float32Array): Float32Array;
  /** Draws one token (does not add it to the penalty window). */
  sample(logits: Float32Array): NativeSample;
  /** Adds tokens to the penalty window. */
  accept(tokens: number | Int32Array): void;
}

export interface NativeGenerationSequence {
  /** Runs the prompt (chunks of `chunk` tokens, default 512) and samples the first token. */
  prefill(ids: Int32Array, chunk?: number): Promise<NativeSample>;
  /** Commits `token` (the last sampled one), runs it and samples the next. */
  step(token: number): Promise<NativeSample>;
  /**
   * Up to `count` (1..4096) steps in one call, as `step` each: the first commits `token`, each
   * later one the token sampled before it; ends after a token in `stopIds` or at the capacity.
   * Plain greedy on a GPU queues each step before it reads the token before it, so a stop token
   * has one more step run after it: the sequence has then ended (later steps are refused).
   */
  steps(token: number, count: number, stopIds?: Int32Array): Promise<NativeSample[]>;
  /** Releases the KV caches now (a step in flight keeps them until it returns). */
  dispose(): void;
  /** Tokens run through the model so far. */
  readonly length: number;
}

/** A JS object carrying a native model (any area's model wrapper, or createTableModel). */
export interface NativeModelHandle {
  readonly vocabSize: number;
}

export interface NativeGenerationStats {
  /** Generation sequences whose native state is alive in this process. */
  liveSequences: number;
}

export interface NativeGeneration {
  Sampler: new (options: NativeSamplingOptions | undefined, vocab: number) => NativeSampler;
  GenerationSequence: new (model: object, options: NativeSamplingOptions | undefined, maxTokens: number) => NativeGenerationSequence;
  /** A bigram model: logits of the next token = row `previous token` of `table` [vocab, vocab]. For tests. */
  createTableModel(table: Float32Array, vocab: number, delayMs?: number): NativeModelHandle;
  generationStats(): NativeGenerationStats;
  /** Vocabulary size of the model a handle carries; InvalidArgumentError when it carries none (or it was disposed). */
  modelVocabSize(model: object): number;
}
