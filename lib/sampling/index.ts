/**
 * @mlx-bun/inference/sampling — sampling options (validated, typed errors) and the native
 * sampling chain for callers that bring their own logits.
 */
export { resolveSampling, SAMPLING_OPTION_NAMES, type ResolvedSampling, type SamplingOptions } from './options.js';
export { Sampler, type SampledToken } from './sampler.js';
