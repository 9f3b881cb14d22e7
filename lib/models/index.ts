/**
 * @mlx-bun/inference/models — loading checkpoints into model handles.
 */
export { loadModel, Model } from './model.js';
export type { LoadModelOptions, LoadProgress, ModelConfig, ModelDevice, ModelDtype } from './model.js';
