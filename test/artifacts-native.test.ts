// Runs the C++-only loader checks (test/native/io_api_test.cc, built by `npm run build`):
// expect_tensor's config-vs-tensor cross-check, views, owned aligned copies, missing tensors.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

describe('loader C++ API', () => {
  it('expect_tensor, get / read_owned and errors pass their native checks', () => {
    const bin = join(packageRoot, 'build', 'io_api_test');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, { encoding: 'utf8', timeout: 60_000 });
    expect(r.stdout).toContain('all io api tests passed');
    expect(r.status).toBe(0);
  });
});
