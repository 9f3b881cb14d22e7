// Runs the C++ check of fused quantized projections (test/native/quant_fuse_check.cc, built by
// `npm run build`): fused q/k/v and gate/up give the parts' outputs bit for bit, parts become
// views, and layers that differ in bits, group size, scale dtype or bias are not fused.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

describe('fused quantized projections', () => {
  it('pass their native check', () => {
    const bin = join(packageRoot, 'build', 'quant_fuse_check');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, [], { encoding: 'utf8', timeout: 120_000 });
    expect(r.stdout).toContain('all quant fuse checks passed');
    expect(r.status).toBe(0);
  });
});
