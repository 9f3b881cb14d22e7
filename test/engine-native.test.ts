// Runs the native engine test program (test/native/engine_scheduler_test.cc, built by
// `npm run build` into build/): SHA-256 vectors, prefix cache, block manager, and the scheduler
// under preemption, prefix reuse, cancellation and chunked prefill, against a fake runner whose
// outputs are checked against a direct computation.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

describe('engine (native, model-free)', () => {
  it('scheduler, block manager, prefix cache and SHA-256 pass their native tests', () => {
    const bin = join(packageRoot, 'build', 'engine_scheduler_test');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, { encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('all engine native tests passed');
  });
});
