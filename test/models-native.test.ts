// Runs the C++-only checks of the models area (test/native/models_check.cc, built by
// `npm run build`): KV-cache legos under many chunk schedules, and rotary frequencies against
// the values transformers computed for every oracle fixture.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';
import { FIXTURE_ROOT, fixtureNames, verifyFixture } from './helpers/model-fixtures.js';

describe('models C++ checks', () => {
  it('kv caches and rope frequencies pass their native checks', () => {
    for (const name of fixtureNames()) verifyFixture(name);
    const bin = join(packageRoot, 'build', 'models_check');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, [FIXTURE_ROOT], { encoding: 'utf8', timeout: 120_000 });
    expect(r.stdout).toContain('all models checks passed');
    expect(r.status).toBe(0);
  });
});
