/**
 * @mlx-bun/inference/generation — generate(): text, chat messages or token ids in, a stream of
 * token events and a final result with stats out; generation_config.json defaults.
 */
export {
  generate, Generation, generationStats, prepareGeneration, runGeneration,
  type FinishReason, type GenerationEvent, type GenerationInput, type GenerationResult, type GenerationStats,
  type GenerationTarget, type PreparedGeneration, type TokenLogprob, type TokenSource,
} from './generate.js';
export { GENERATE_OPTION_NAMES, MAX_TOKENS_LIMIT, resolveGenerateOptions, type GenerateOptions, type ResolvedGenerateOptions } from './options.js';
export { loadGenerationConfig, parseGenerationConfig, type GenerationConfig } from './config.js';
export { StopStringFilter } from './stop.js';
export { LanguageModel, loadLanguageModel, type LoadLanguageModelOptions } from './language_model.js';
export { speculativeGenerate, type SpeculativeOptions, type SpeculativeStats, type SpeculativeTarget } from './speculative.js';
