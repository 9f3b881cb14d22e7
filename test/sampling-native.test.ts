// Runs the native sampling check (test/native/sampler_device_check.cc, built by `npm run build`
// into build/): the generic ops::sample - the reference of the CUDA sampling kernels - against the
// host Sampler on random logits (same tokens for the same seed, chi-square of 20000 draws against
// Sampler.distribution(), NaN / -inf / single-candidate statuses), and the Sampler's candidate
// storage reused across calls.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

describe('sampling (native): ops::sample reference vs the host Sampler', () => {
  it('agrees token for token and in distribution', () => {
    const bin = join(packageRoot, 'build', 'sampler_device_check');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, { encoding: 'utf8', timeout: 120_000 });
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('PASSED: 0 failure(s)');
    expect(r.stdout).toContain('sample cpu: 0/');
    expect(r.status).toBe(0);
  });
});
