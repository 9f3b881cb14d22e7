import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';
import { MlxbError } from '../lib/errors.js';

describe('addon', () => {
  it('loads and reports its build', () => {
    const info = native().buildInfo();
    expect(info.threads).toBeGreaterThanOrEqual(1);
    expect(typeof info.cudaBuilt).toBe('boolean');
    // No GPU on CI machines: the backend must say so instead of crashing.
    if (!process.env.MLXB_TEST_CUDA) expect(info.cudaAvailable).toBe(false);
  });
  it('errors raised in C++ arrive as typed MlxbError', () => {
    expect(MlxbError).toBeTypeOf('function');
  });
});
