// The oracle fixtures are pinned: every file matches manifest.json and every fixture is complete.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { FIXTURE_ROOT, fixtureNames, manifest, oracle, verifyFixture } from './helpers/model-fixtures.js';

const FAMILIES = ['llama', 'mistral', 'qwen2', 'qwen3', 'gemma2', 'gemma3_text', 'phi3'];
const FILES = ['config.json', 'config.alt.json', 'model.safetensors', 'logits.f32', 'greedy_logits.f32', 'oracle.json'];

describe('model oracle fixtures', () => {
  it('cover every family', () => {
    const types = new Set(fixtureNames().map((n) => oracle(n).model_type));
    for (const f of FAMILIES) expect(types.has(f), f).toBe(true);
  });
  it('hold no file outside the manifest', () => {
    const m = manifest().fixtures;
    for (const entry of readdirSync(FIXTURE_ROOT)) {
      if (!statSync(join(FIXTURE_ROOT, entry)).isDirectory()) continue;
      expect(Object.keys(m), entry).toContain(entry);
      for (const file of readdirSync(join(FIXTURE_ROOT, entry))) expect(Object.keys(m[entry] ?? {}), `${entry}/${file}`).toContain(file);
    }
  });
  for (const name of fixtureNames()) {
    it(`${name}: files match their SHA-256 and shapes agree`, () => {
      verifyFixture(name);
      for (const f of FILES) expect(Object.keys(manifest().fixtures[name] ?? {})).toContain(f);
      const o = oracle(name);
      expect(o.logits.shape).toEqual([o.prompt_ids.length, o.vocab_size]);
      expect(o.greedy_tokens.length).toBe(o.greedy_logits.shape[0]);
      expect(statSync(join(FIXTURE_ROOT, name, 'logits.f32')).size).toBe(o.prompt_ids.length * o.vocab_size * 4);
    });
  }
});
