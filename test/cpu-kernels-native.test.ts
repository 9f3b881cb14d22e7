// Runs the native CPU kernel test (test/native/cpu_kernels_test.cc, built by `npm run build`):
// every SIMD matmul family this CPU supports, AVX2 attention and activations, against a
// double-precision reference. The same binary runs without Node on hosts with AVX-512.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

describe('cpu kernels (native)', () => {
  it('every SIMD family this CPU runs matches the double-precision reference', () => {
    const bin = join(packageRoot, 'build', 'cpu_kernels_test');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, { encoding: 'utf8', timeout: 120_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('all cpu kernel tests passed');
  });
});
