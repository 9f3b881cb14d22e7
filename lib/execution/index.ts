/**
 * @mlx-bun/inference/execution — the continuous-batching engine: many concurrent generations of
 * one model, admission with a bounded queue, cancellation, paged KV with prefix reuse.
 */
export { createInferenceEngine, InferenceEngine, type CloseOptions, type EngineStats } from './engine.js';
export { ENGINE_OPTION_NAMES, type InferenceEngineOptions } from './options.js';
