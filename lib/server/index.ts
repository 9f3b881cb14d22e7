/**
 * @mlx-bun/inference/server — an OpenAI-compatible HTTP server over an InferenceEngine
 * (node:http, no framework), built only on the package's public API.
 */
export { createServer, type RunningServer, type ServerOptions } from './server.js';
export type { EmbeddingService } from './embeddings.js';
