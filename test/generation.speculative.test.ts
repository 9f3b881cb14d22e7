// Speculative generation on the CPU over the oracle fixtures (token ids in). Greedy: the tokens
// are exactly plain generate()'s, whatever the draft (the same model: every proposal kept; another
// family's random model: most rejected). Sampling: the acceptance rule must leave the target's
// distribution as it is, checked by frequencies against the target's own probabilities. Also
// Session.truncate (a rolled-back session continues as if the dropped tokens never ran) and the
// typed refusals.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { main } from '../lib/cli/main.js';

import { InvalidArgumentError, UnsupportedError } from '../lib/errors.js';
import { generate, loadLanguageModel, speculativeGenerate, type LanguageModel } from '../lib/generation/index.js';
import { acceptOrResample, uniform } from '../lib/generation/speculative.js';
import { Sampler } from '../lib/sampling/index.js';
import { Session } from '../lib/state/index.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';
import { fixtureDir, oracle } from './helpers/model-fixtures.js';

let qwen3: LanguageModel;
let llama: LanguageModel;
let phi3: LanguageModel;
const prompt = () => oracle('qwen3').prompt_ids.slice(0, 10);

beforeAll(async () => {
  qwen3 = await loadLanguageModel(fixtureDir('qwen3'), { device: 'cpu', dtype: 'float32' });
  llama = await loadLanguageModel(fixtureDir('llama'), { device: 'cpu', dtype: 'float32' });
  phi3 = await loadLanguageModel(fixtureDir('phi3'), { device: 'cpu', dtype: 'float32' });
});
afterAll(() => {
  qwen3?.dispose();
  llama?.dispose();
  phi3?.dispose();
});

describe('Session.truncate', () => {
  it('a rolled-back session gives the logits of a session that never saw the dropped tokens', async () => {
    const ids = prompt();
    using a = new Session(qwen3.model, { maxTokens: 64 });
    using b = new Session(qwen3.model, { maxTokens: 64 });
    await a.forward(ids);
    await a.forward([5, 6, 7]);
    a.truncate(ids.length + 1);
    expect(a.length).toBe(ids.length + 1);
    const got = await a.forward([9]);
    await b.forward([...ids, 5]);
    const want = await b.forward([9]);
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(() => a.truncate(a.length + 1)).toThrow(InvalidArgumentError);
  });

  it('sliding-window caches refuse and stay as they were', async () => {
    await using g = await loadLanguageModel(fixtureDir('gemma2'), { device: 'cpu', dtype: 'float32' });
    using s = new Session(g.model, { maxTokens: 32 });
    await s.forward([1, 2, 3, 4]);
    expect(() => s.truncate(2)).toThrow(UnsupportedError);
    expect(s.length).toBe(4);
  });
});

describe('speculativeGenerate, greedy', () => {
  for (const [label, draft] of [['the same model', () => qwen3], ['a different random model', () => llama], ['another family', () => phi3]] as const) {
    for (const k of [1, 4, 7]) {
      it(`draft = ${label}, draftTokens ${k}: the tokens of plain greedy generate()`, async () => {
        const want = await generate(qwen3, prompt(), { maxTokens: 40, temperature: 0, stopTokenIds: [] }).complete();
        const gen = speculativeGenerate(qwen3, draft(), prompt(), { maxTokens: 40, temperature: 0, stopTokenIds: [], draftTokens: k });
        const events: number[] = [];
        for await (const e of gen) events.push(e.token);
        const r = await gen.result;
        expect(r.tokens).toEqual(want.tokens);
        expect(events).toEqual(want.tokens);
        expect(r.generatedTokens).toBe(40);
        expect(r.finishReason).toBe('length');
        expect(r.speculative.accepted).toBeLessThanOrEqual(r.speculative.drafted);
        if (draft() === qwen3) expect(r.speculative.accepted).toBe(r.speculative.drafted);
        else expect(r.speculative.accepted).toBeLessThan(r.speculative.drafted);
        // Every proposal kept: each target forward gives k + 1 tokens.
        if (draft() === qwen3) expect(r.speculative.rounds).toBe(Math.ceil(39 / (k + 1)));
      });
    }
  }

  it('stops at a stop id inside an accepted run, and at maxTokens exactly', async () => {
    const plain = await generate(qwen3, prompt(), { maxTokens: 30, temperature: 0, stopTokenIds: [] }).complete();
    const stopAt = plain.tokens[13]!;
    const first = plain.tokens.indexOf(stopAt);
    const r = await speculativeGenerate(qwen3, qwen3, prompt(), { maxTokens: 30, temperature: 0, stopTokenIds: [stopAt], draftTokens: 5 }).complete();
    expect(r.tokens).toEqual(plain.tokens.slice(0, first + 1));
    expect(r.finishReason).toBe('stop');
    expect(r.stoppedBy).toBe(stopAt);
    for (const n of [1, 2, 6]) {
      const s = await speculativeGenerate(qwen3, llama, prompt(), { maxTokens: n, temperature: 0, stopTokenIds: [], draftTokens: 4 }).complete();
      expect(s.tokens).toEqual(plain.tokens.slice(0, n));
    }
  });
});

describe('speculativeGenerate, log-probabilities', () => {
  it("are generate()'s: the token's and the top 5, with penalties and a bias in play, greedy and sampled", async () => {
    const opts = { maxTokens: 24, stopTokenIds: [], logprobs: true, topLogprobs: 5, repetitionPenalty: 1.3, logitBias: { 7: 2.5 } };
    for (const [label, o] of [['greedy', { temperature: 0 }], ['sampled', { temperature: 0.9, seed: 11 }]] as const) {
      // Greedy: the same tokens as plain decoding whatever the draft; sampled: the model is its
      // own draft, so every proposal is kept and the draws line up with generate()'s... only in
      // distribution, so there the reference is generate() forced through the same tokens.
      const gen = speculativeGenerate(qwen3, label === 'greedy' ? llama : qwen3, prompt(), { ...opts, ...o, draftTokens: 3 });
      const got: Array<{ token: number; logprob?: number; top?: Array<{ token: number; logprob: number }> }> = [];
      for await (const e of gen) got.push({ token: e.token, logprob: e.logprob, top: e.topLogprobs });
      const tokens = got.map((e) => e.token);
      // Reference: generate() over the same prefix at each position (greedy: one run gives all).
      const want: typeof got = [];
      if (label === 'greedy') {
        for await (const e of generate(qwen3, prompt(), { ...opts, ...o })) want.push({ token: e.token, logprob: e.logprob, top: e.topLogprobs });
        expect(tokens).toEqual(want.map((e) => e.token));
      } else {
        for (let i = 0; i < tokens.length; i++) {
          // generate() with the tokens so far as a continuation of the prompt gives the position's
          // logprobs for whatever it draws; its top list is the reference, and the token's own
          // logprob must be the one the list (or the full row) gives it.
          const g = generate(qwen3, [...prompt(), ...tokens.slice(0, i)], { ...opts, temperature: 0, maxTokens: 1 });
          let first: (typeof got)[number] | undefined;
          for await (const e of g) first ??= { token: e.token, logprob: e.logprob, top: e.topLogprobs };
          want.push(first!);
        }
      }
      for (let i = 0; i < got.length; i++) {
        const a = got[i]!, b = want[i]!;
        expect(a.top!.map((t) => t.token), `${label} position ${i}`).toEqual(b.top!.map((t) => t.token));
        for (let j = 0; j < 5; j++) expect(a.top![j]!.logprob).toBeCloseTo(b.top![j]!.logprob, 4);
        if (label === 'greedy') expect(a.logprob!).toBeCloseTo(b.logprob!, 4);
        else {
          const inTop = b.top!.find((t) => t.token === a.token);
          if (inTop) expect(a.logprob!).toBeCloseTo(inTop.logprob, 4);
          expect(a.logprob!).toBeLessThanOrEqual(b.top![0]!.logprob + 1e-6);
        }
      }
    }
  });
});

describe('the acceptance rule', () => {
  it('whatever the draft distribution, the resulting token is distributed as the target (exact expectation and 200k draws)', () => {
    const cases: Array<[number[], number[]]> = [
      [[0.5, 0.3, 0.2, 0, 0], [0.1, 0.1, 0.1, 0.4, 0.3]],   // supports partly disjoint
      [[0.25, 0.25, 0.25, 0.25, 0], [0.7, 0.1, 0.1, 0.05, 0.05]],
      [[0, 0, 1, 0, 0], [0.2, 0.2, 0.2, 0.2, 0.2]],           // a greedy target
      [[0.1, 0.2, 0.3, 0.2, 0.2], [0.1, 0.2, 0.3, 0.2, 0.2]], // the same: always kept
    ];
    for (const [p, q] of cases) {
      const u = uniform(12345);
      const n = 200_000;
      const counts = new Array<number>(p.length).fill(0);
      let kept = 0;
      for (let i = 0; i < n; i++) {
        // x ~ q
        let r = u(), x = 0;
        while (x < q.length - 1 && (r -= q[x]!) >= 0) x++;
        const y = acceptOrResample(p, q, x, u);
        if (y < 0) kept++;
        counts[y < 0 ? x : y]++;
      }
      for (let j = 0; j < p.length; j++) expect(Math.abs(counts[j]! / n - p[j]!), `p ${p} q ${q} token ${j}`).toBeLessThan(0.005);
      // Kept with probability sum_x min(p(x), q(x)).
      const keep = p.reduce((a, pj, j) => a + Math.min(pj, q[j]!), 0);
      expect(Math.abs(kept / n - keep)).toBeLessThan(0.005);
    }
  });
});

describe('speculativeGenerate, sampling', () => {
  it("keeps the target's distribution (second token's frequencies against the target's probabilities)", async () => {
    const opts = { temperature: 1.3, topK: 6 };
    const runs = 500;
    const counts = new Map<number, Map<number, number>>();
    for (let seed = 0; seed < runs; seed++) {
      const r = await speculativeGenerate(qwen3, llama, prompt(), { ...opts, seed, maxTokens: 2, stopTokenIds: [], draftTokens: 1 }).complete();
      const [t1, t2] = r.tokens as [number, number];
      const m = counts.get(t1) ?? new Map<number, number>();
      m.set(t2, (m.get(t2) ?? 0) + 1);
      counts.set(t1, m);
    }
    let checked = 0;
    for (const [t1, m] of counts) {
      const n = [...m.values()].reduce((a, b) => a + b, 0);
      if (n < 60) continue;
      using s = new Session(qwen3.model, { maxTokens: 32 });
      await s.forward(prompt());
      const logits = await s.forward([t1]);
      const sampler = new Sampler(opts, qwen3.vocabSize);
      sampler.accept([...prompt(), t1]);
      const p = sampler.distribution(logits);
      for (let tok = 0; tok < p.length; tok++) {
        const f = (m.get(tok) ?? 0) / n;
        const sd = Math.sqrt((p[tok]! * (1 - p[tok]!)) / n);
        expect(Math.abs(f - p[tok]!), `t1 ${t1} token ${tok}: ${f} vs ${p[tok]}`).toBeLessThan(4.5 * sd + 0.01);
        if (p[tok] === 0) expect(m.get(tok) ?? 0).toBe(0);
      }
      checked++;
    }
    expect(checked).toBeGreaterThan(0);
  }, 120_000);

  it('the same seed gives the same tokens', async () => {
    const o = { temperature: 0.9, topP: 0.9, seed: 7, maxTokens: 24, stopTokenIds: [], draftTokens: 3 };
    const a = await speculativeGenerate(qwen3, llama, prompt(), o).complete();
    const b = await speculativeGenerate(qwen3, llama, prompt(), o).complete();
    expect(a.tokens).toEqual(b.tokens);
  });
});

describe('speculativeGenerate, refusals', () => {
  it('typed errors before anything runs', async () => {
    await using g = await loadLanguageModel(fixtureDir('gemma2'), { device: 'cpu', dtype: 'float32' });
    await using q2 = await loadLanguageModel(fixtureDir('qwen2'), { device: 'cpu', dtype: 'float32' });
    const cases: Array<[() => unknown, new (...a: never[]) => Error, string]> = [
      [() => speculativeGenerate(g, g, prompt()), UnsupportedError, 'target'],
      [() => speculativeGenerate(qwen3, g, prompt()), UnsupportedError, 'draft'],
      [() => speculativeGenerate(qwen3, q2, prompt()), InvalidArgumentError, 'draft'],
      [() => speculativeGenerate(qwen3, llama, prompt(), { draftTokens: 0 }), InvalidArgumentError, 'draftTokens'],
      [() => speculativeGenerate(qwen3, {} as never, prompt()), InvalidArgumentError, 'draft'],
      [() => speculativeGenerate(qwen3, llama, prompt(), { maxTokens: 0 }), InvalidArgumentError, 'maxTokens'],
    ];
    for (const [f, type, field] of cases) {
      let err: unknown;
      try { f(); } catch (e) { err = e; }
      expect(err, field).toBeInstanceOf(type);
      expect((err as { field?: string }).field, field).toBe(field);
    }
  });
});

describe('mlx-bun generate --draft', () => {
  it('greedy with a draft prints the same result as without, and the draft stats', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'mlxb-spec-cli-'));
    try {
      const dir = makeTinyCheckpoint(join(tmp, 'tiny')) as string;
      const run = async (extra: string[]) => {
        let out = '', err = '';
        const io = { stdout: { write: (x: string) => { out += x; return true; } }, stderr: { write: (x: string) => { err += x; return true; }, isTTY: false } };
        const code = await main(['generate', '-m', dir, '--raw', '-t', '0', '-n', '16', '--json', '--stats', ...extra, 'Once upon a time'], io);
        return { code, out, err };
      };
      const plain = await run([]);
      const spec = await run(['--draft', dir, '--draft-tokens', '3']);
      expect([plain.code, spec.code]).toEqual([0, 0]);
      const a = JSON.parse(plain.out) as { tokens: number[]; text: string };
      const b = JSON.parse(spec.out) as { tokens: number[]; text: string; speculative: { drafted: number; accepted: number } };
      expect(b.tokens).toEqual(a.tokens);
      expect(b.text).toBe(a.text);
      expect(b.speculative.accepted).toBe(b.speculative.drafted);
      expect(spec.err).toMatch(/draft: \d+ of \d+ proposals kept/);
      const bad = await run(['--draft-tokens', '3']);
      expect(bad.code).toBe(1);
      expect(bad.err).toMatch(/--draft-tokens needs --draft/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 120_000);
});
