import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(__dirname, '..');
const bunBin = join(root, 'node_modules', '.bin', 'bun');

describe('bun', () => {
  it('loads the built package and its addon under Bun, generates, and runs a grammar in its worker', () => {
    expect(existsSync(join(root, 'dist', 'native', 'index.js')), 'run npm run build first').toBe(true);
    const r = spawnSync(bunBin, [join(root, 'test', 'bun', 'smoke.mjs')], { encoding: 'utf8', timeout: 90_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const line = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}');
    expect(line.runtime).toMatch(/^bun \d/);
    expect(line.threads).toBeGreaterThanOrEqual(1);
    expect(line.plainTokens).toBe(8);
    expect(line.jsonFinish).toBe('stop');
    const v = JSON.parse(line.json) as Record<string, unknown>;
    expect(Object.keys(v)).toEqual(['ok']);
    expect(typeof v.ok).toBe('boolean');
  });
});
