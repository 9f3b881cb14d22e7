import { defineConfig } from 'vitest/config';

// Tests touching native state run in forked workers (one process per file).
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
