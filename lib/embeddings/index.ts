/**
 * @mlx-bun/inference/embeddings — pooled text embeddings from a loaded decoder (last-token, mean
 * or first-token pooling, truncation, L2 normalisation) and the sentence-transformers profile of
 * a checkpoint (its pooling, normalisation and named prompts).
 */
export { embed, embedMany, withInstruction, POOLINGS } from './embed.js';
export type { Embedding, EmbeddingInput, EmbeddingTarget, EmbedOptions, Pooling } from './embed.js';
export { loadEmbeddingProfile, type EmbeddingProfile } from './profile.js';
