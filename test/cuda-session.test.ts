// Opt-in GPU check (MLXB_TEST_CUDA=1) of the session features that so far ran only on the CPU:
// Session.save / restore and Session.truncate on CUDA caches, speculative generation with CUDA
// sessions, and grammar-constrained generation reading CUDA logits.
// - save / restore: the restored session continues with the saved one's logits, bit for bit
//   (the same kernels on the same cache contents), one token (a recorded decode step) and three.
// - truncate: a session rolled back to k tokens continues exactly as one that stopped at k; both
//   filled their first k slots by the same call, so the comparison is bit for bit.
// - speculative, the model as its own draft: every proposal is kept, and each emitted token is the
//   argmax of the target's own logits for its prefix (checked by one more forward over the whole
//   sequence, up to near-ties within bf16 rounding).
// - grammar: every output parses and satisfies the schema.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { generate, loadLanguageModel, speculativeGenerate, type LanguageModel } from '../lib/generation/index.js';
import { Session } from '../lib/state/index.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';
import { fixtureDir, oracle } from './helpers/model-fixtures.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';
const families = ['qwen3', 'llama'] as const;

describe.skipIf(!enabled)('sessions on CUDA', () => {
  let tmp: string;
  const lms = new Map<string, LanguageModel>();
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mlxb-cuda-session-'));
    for (const f of families) lms.set(f, await loadLanguageModel(fixtureDir(f), { device: 'cuda', dtype: 'bfloat16' }));
  }, 120_000);
  afterAll(() => {
    for (const lm of lms.values()) lm.dispose();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });
  const ids = (f: string) => oracle(f).prompt_ids.slice(0, 20);

  for (const f of families) {
    it(`${f}: a restored session continues bit for bit (one token, then three)`, async () => {
      const model = lms.get(f)!.model;
      const path = join(tmp, `${f}.session`);
      using a = new Session(model, { maxTokens: 64 });
      await a.forward(ids(f).slice(0, 12));
      await a.forward(ids(f).slice(12));
      await a.forward([7]);
      await a.save(path);
      using b = await Session.restore(model, path);
      expect(b.tokens).toEqual([...ids(f), 7]);
      for (const next of [[11], [3, 141, 59], [2]]) {
        const want = Array.from(await a.forward(next, { allRows: true }));
        expect(Array.from(await b.forward(next, { allRows: true }))).toEqual(want);
      }
    });

    it(`${f}: a truncated session continues as one that stopped there`, async () => {
      const model = lms.get(f)!.model;
      const k = 12;
      using a = new Session(model, { maxTokens: 64 });
      using b = new Session(model, { maxTokens: 64 });
      await a.forward(ids(f).slice(0, k));
      await b.forward(ids(f).slice(0, k));
      await a.forward(ids(f).slice(k));
      for (let i = 0; i < 5; i++) await a.forward([9 + i]);  // decode steps (recorded graphs) past k
      a.truncate(k);
      expect(a.tokens).toEqual(ids(f).slice(0, k));
      for (const next of [[5], [6], [3, 141, 59], [8]]) {
        const want = Array.from(await b.forward(next, { allRows: true }));
        expect(Array.from(await a.forward(next, { allRows: true }))).toEqual(want);
      }
    });

    it(`${f}: speculative generation with the model as its own draft keeps every proposal`, async () => {
      const lm = lms.get(f)!;
      const prompt = ids(f).slice(0, 10);
      const gen = speculativeGenerate(lm, lm, prompt, { maxTokens: 32, temperature: 0, stopTokenIds: [], draftTokens: 4 });
      for await (const _ of gen);  // the generation runs as it is read
      const r = await gen.result;
      expect(r.generatedTokens).toBe(32);
      // Each emitted token against the argmax of one forward over the whole sequence: the verification
      // and draft steps ran other shapes, so a near-tie may round either way; allow one such place.
      using s = new Session(lm.model, { maxTokens: 64 });
      const seq = [...prompt, ...r.tokens];
      const logits = await s.forward(seq.slice(0, -1), { allRows: true });
      const V = logits.length / (seq.length - 1);
      let differing = 0;
      for (let t = prompt.length - 1; t < seq.length - 1; t++) {
        const row = logits.subarray(t * V, (t + 1) * V);
        let best = 0;
        for (let j = 1; j < V; j++) if (row[j]! > row[best]!) best = j;
        if (best !== seq[t + 1]) {
          differing++;
          expect(row[best]! - row[seq[t + 1]!]!, `${f} position ${t}`).toBeLessThan(0.05 * Math.abs(row[best]!) + 1e-2);
        }
      }
      expect(differing).toBeLessThanOrEqual(1);
      expect(r.speculative.accepted).toBeGreaterThanOrEqual(r.speculative.drafted - 4);
    });
  }

  it('grammar-constrained generation on CUDA logits: every output satisfies the schema', async () => {
    await using lm = await loadLanguageModel(makeTinyCheckpoint(join(tmp, 'tiny')) as string, { device: 'cuda' });
    const schema = {
      type: 'object',
      properties: { ok: { type: 'boolean' }, color: { enum: ['red', 'green', 'blue'] }, n: { type: 'integer', minimum: 0, maximum: 99 } },
      required: ['ok', 'color', 'n'],
      additionalProperties: false,
    };
    for (const temperature of [0, 1, 4]) {
      for (let seed = 1; seed <= 3; seed++) {
        const r = await generate(lm, [{ role: 'user', content: 'Describe a thing as JSON.' }], {
          grammar: { type: 'json_schema', schema }, maxTokens: 80, temperature, seed,
        }).complete();
        expect(r.finishReason, r.text).toBe('stop');
        const v = JSON.parse(r.text) as { ok: unknown; color: unknown; n: unknown };
        expect(Object.keys(v).sort().join()).toBe('color,n,ok');
        expect(typeof v.ok).toBe('boolean');
        expect(['red', 'green', 'blue']).toContain(v.color);
        expect(Number.isInteger(v.n) && (v.n as number) >= 0 && (v.n as number) <= 99).toBe(true);
      }
    }
  }, 120_000);
});
