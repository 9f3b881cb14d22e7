// Bad-input corpus for the loader: > 1,000 malformed safetensors files / checkpoint directories
// and > 200 broken config.json files, generated deterministically into a temp dir, each run in a
// CHILD process through lib/native. Every case must end in its typed error class (and `field`),
// and a crash of the child fails the case it was running instead of killing the test runner.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';
import { buildDirectoryCorpus } from './support/checkpoint-dir-corpus.js';
import { buildConfigCorpus } from './support/config-corpus.js';
import { mismatch, runCorpus } from './support/corpus-runner.js';
import type { CorpusCase, CorpusResult } from './support/corpus-types.js';
import { buildSafetensorsCorpus } from './support/safetensors-corpus.js';

const root = mkdtempSync(join(tmpdir(), 'mlxb-corpus-'));
const sub = (name: string) => {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  return d;
};
const cases: CorpusCase[] = [
  ...buildSafetensorsCorpus(sub('st')),
  ...buildDirectoryCorpus(sub('dirs')),
  ...buildConfigCorpus(sub('cfg')),
];
const groups = [...new Set(cases.map((c) => c.group))];

let results = new Map<string, CorpusResult>();
beforeAll(() => { results = runCorpus(cases, root); }, 600_000);
// MLXB_CORPUS_KEEP=1 keeps the generated corpus (e.g. to run a sanitizer build of
// test/native/io_corpus_check over root/cases.json).
afterAll(() => {
  if (process.env.MLXB_CORPUS_KEEP) console.log(`corpus kept in ${root}`);
  else rmSync(root, { recursive: true, force: true });
});

describe('loader bad-input corpus (child process)', () => {
  it('is large enough: >= 1000 safetensors cases, >= 200 config cases', () => {
    const st = cases.filter((c) => c.op !== 'config' && c.error !== null).length;
    const cfg = cases.filter((c) => c.op === 'config' && c.error !== null).length;
    expect(st).toBeGreaterThanOrEqual(1000);
    expect(cfg).toBeGreaterThanOrEqual(200);
    expect(new Set(cases.map((c) => c.id)).size).toBe(cases.length);
  });

  it('no case crashed the child process', () => {
    const crashed = [...results.values()].filter((r) => r.error === 'CRASH').map((r) => `${r.id}: ${r.message}`);
    expect(crashed).toEqual([]);
  });

  it('the C++ API gives the same outcomes without Node-API in between, and survives random mutations (test/native/io_corpus_check)', () => {
    const bin = join(packageRoot, 'build', 'io_corpus_check');
    expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
    const r = spawnSync(bin, [join(root, 'cases.json'), '20000'], { encoding: 'utf8', timeout: 300_000 });
    expect(r.stdout).toContain(`io corpus: ${cases.length} cases, 0 mismatches`);
    expect(r.stdout).toContain('io fuzz: 40000 inputs, 0 bad');
    expect(r.status).toBe(0);
  });

  for (const g of groups) {
    it(`group ${g}: every case gives its typed error (or opens, for controls)`, () => {
      const bad = cases.filter((c) => c.group === g).map((c) => mismatch(c, results.get(c.id))).filter((m) => m !== null);
      expect(bad).toEqual([]);
    });
  }
});

describe('corpus harness', () => {
  it('pins a crash of the child on its case and resumes with the next one', () => {
    const dir = sub('harness');
    writeFileSync(join(dir, 'config.json'), '{}');
    const mk = (id: string): CorpusCase => ({ id, group: 'harness', op: 'config', path: dir, error: 'ConfigError', field: 'model_type' });
    const small = [mk('h1'), mk('h2'), mk('h3')];
    const r = runCorpus(small, dir, { ...process.env, MLXB_CORPUS_CRASH_CASE: 'h2' });
    expect(r.get('h2')?.error).toBe('CRASH');
    expect(mismatch(small[1]!, r.get('h2'))).toMatch(/expected ConfigError, got CRASH/);
    expect(mismatch(small[0]!, r.get('h1'))).toBeNull();
    expect(mismatch(small[2]!, r.get('h3'))).toBeNull();
    // A wrong expectation is reported, not silently accepted.
    expect(mismatch({ ...small[0]!, field: 'vocab_size' }, r.get('h1'))).toMatch(/field "model_type" not in/);
    expect(mismatch({ ...small[0]!, error: 'InvalidFileError' }, r.get('h1'))).toMatch(/expected InvalidFileError, got ConfigError/);
    expect(mismatch({ ...small[0]!, error: null }, r.get('h1'))).toMatch(/expected success/);
  });
});
