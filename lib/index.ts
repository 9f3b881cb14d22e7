/**
 * @mlx-bun/inference — root entry: loading, generation and the typed errors.
 * Component subpaths (artifacts, models, scoring, state, ...) expose the pieces.
 */
export * from './errors.js';
