/**
 * @mlx-bun/inference — root entry: loading, generation and the typed errors.
 * Component subpaths (artifacts, models, scoring, state, ...) expose the pieces.
 */
export * from './errors.js';
export { loadModel, Model } from './models/index.js';
export type { LoadModelOptions, LoadProgress, ModelConfig, ModelDevice, ModelDtype } from './models/index.js';
export { forwardSequence, greedyTokens, hiddenStates } from './scoring/index.js';
export { embed, embedMany, loadEmbeddingProfile, withInstruction } from './embeddings/index.js';
export type { Embedding, EmbeddingInput, EmbeddingProfile, EmbeddingTarget, EmbedOptions, Pooling } from './embeddings/index.js';
export { Session } from './state/index.js';
export type { SessionOptions } from './state/index.js';
export { loadTokenizer, ChatTemplate, StreamingDetokenizer, type ChatMessage } from './input/index.js';
export {
  generate, Generation, generationStats, loadGenerationConfig, loadLanguageModel, LanguageModel,
  type LoadLanguageModelOptions,
  type GenerateOptions, type GenerationEvent, type GenerationInput, type GenerationResult, type GenerationTarget, type FinishReason,
} from './generation/index.js';
export { Sampler, type SamplingOptions } from './sampling/index.js';
