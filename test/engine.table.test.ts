// The execution layer on the bigram table model (exact, fast): engine.generate() equals plain
// generate() for the same options, concurrency, abort, busy, close and option validation.
import { describe, expect, it } from 'vitest';

import { BusyError, InvalidArgumentError, AbortError } from '../lib/errors.js';
import { createInferenceEngine } from '../lib/execution/index.js';
import { generate } from '../lib/generation/index.js';
import { tableGreedy, tinyModel } from './helpers/tiny_text_model.js';

describe('engine on the table model', () => {
  it('greedy and seeded sampling equal plain generate(), 12 requests at once', async () => {
    const m = tinyModel({ seed: 3 });
    const engine = createInferenceEngine(m, { maxRows: 4, blockSize: 4, maxContext: 512 });
    const prompts = Array.from({ length: 12 }, (_, i) => `prompt number ${i} ` + 'x'.repeat(i * 3));
    const opts = (i: number) => (i % 2 ? { maxTokens: 20, temperature: 0 } : { maxTokens: 25, temperature: 0.9, topP: 0.9, seed: 1000 + i });
    const alone = [];
    for (let i = 0; i < prompts.length; i++) alone.push(await generate(m, prompts[i]!, opts(i)).complete());
    const together = await Promise.all(prompts.map((p, i) => engine.generate(p, opts(i)).complete()));
    for (let i = 0; i < prompts.length; i++) {
      expect(together[i]!.tokens).toEqual(alone[i]!.tokens);
      expect(together[i]!.text).toEqual(alone[i]!.text);
      expect(together[i]!.finishReason).toBe(alone[i]!.finishReason);
    }
    const ids = m.tokenizer!.encode(prompts[1]!);
    expect(together[1]!.tokens).toEqual(tableGreedy(m.table, ids[ids.length - 1]!, 20));
    const s = engine.stats();
    expect(s.rows).toBe(0);
    expect(s.queue).toBe(0);
    expect(s.kvBlocks.used).toBe(0);
    expect(s.kvBlocks.free + s.kvBlocks.cached).toBe(s.kvBlocks.total);
    expect(s.generatedTokens).toBe(together.reduce((a, r) => a + r.tokens.length, 0));
    await engine.close();
  });

  it('abort and break end one stream, the others are unchanged', async () => {
    const m = tinyModel({ seed: 5, delayMs: 2 });
    const engine = createInferenceEngine(m, { maxRows: 8, blockSize: 4, maxContext: 1024 });
    const want = await generate(m, 'stay', { maxTokens: 40 }).complete();
    const ac = new AbortController();
    const a = engine.generate('stay', { maxTokens: 40 });
    const b = engine.generate('go away', { maxTokens: 200, signal: ac.signal });
    const c = engine.generate('break early', { maxTokens: 200 });
    let seen = 0;
    const bDone = (async () => { for await (const _ of b) { if (++seen === 3) ac.abort(); } return b.result; })();
    const cDone = (async () => { let n = 0; for await (const _ of c) { if (++n === 2) break; } return c.result; })();
    const [ra, rb, rc] = await Promise.all([a.complete(), bDone, cDone]);
    expect(ra.tokens).toEqual(want.tokens);
    expect(rb.finishReason).toBe('abort');
    expect(rb.tokens.length).toBeLessThan(200);
    expect(rc.finishReason).toBe('abort');
    expect(rc.tokens.length).toBe(2);
    // The cancelled rows leave within a step: soon nothing runs and every block is back.
    for (let i = 0; i < 100 && engine.stats().rows > 0; i++) await new Promise((r) => setTimeout(r, 5));
    const s = engine.stats();
    expect(s.rows).toBe(0);
    expect(s.kvBlocks.free + s.kvBlocks.cached).toBe(s.kvBlocks.total);
    await engine.close();
  });

  it('a full queue throws BusyError; close drains; generate after close throws', async () => {
    const m = tinyModel({ seed: 7, delayMs: 5 });
    const engine = createInferenceEngine(m, { maxRows: 1, maxQueue: 2, maxContext: 256 });
    const running = [engine.generate('a', { maxTokens: 5 }), engine.generate('b', { maxTokens: 5 })];
    // The first is admitted on the engine thread at its next step; fill the queue until busy.
    let busy: unknown;
    const extra = [];
    for (let i = 0; i < 5 && !busy; i++) {
      try { extra.push(engine.generate('c', { maxTokens: 5 })); } catch (e) { busy = e; }
    }
    expect(busy).toBeInstanceOf(BusyError);
    const closing = engine.close();
    expect(() => engine.generate('late')).toThrow(AbortError);
    const results = await Promise.all([...running, ...extra].map((g) => g.complete()));
    for (const r of results) expect(r.tokens.length).toBe(5);
    await closing;
    expect(engine.stats().closed).toBe(true);
  });

  it('close({ abort: true }) ends running streams with AbortError', async () => {
    const m = tinyModel({ seed: 8, delayMs: 5 });
    const engine = createInferenceEngine(m, { maxContext: 4096 });
    const g = engine.generate('long', { maxTokens: 2000 });
    const it = g[Symbol.asyncIterator]();
    await it.next();
    await engine.close({ abort: true });
    await expect((async () => { for (;;) { const r = await it.next(); if (r.done) break; } })()).rejects.toThrow(AbortError);
  });

  it('validates options with typed errors naming them', () => {
    const m = tinyModel();
    expect(() => createInferenceEngine(m, { maxRows: 0 })).toThrow(InvalidArgumentError);
    expect(() => createInferenceEngine(m, { blockSize: 1.5 })).toThrow(/blockSize/);
    expect(() => createInferenceEngine(m, { kvBlocks: 4, kvBytes: 100 })).toThrow(/kvBytes/);
    expect(() => createInferenceEngine(m, { prefixCache: 'yes' as unknown as boolean })).toThrow(/prefixCache/);
    expect(() => createInferenceEngine(m, { bogus: 1 } as never)).toThrow(/bogus/);
    expect(() => createInferenceEngine({} as never)).toThrow(/model/);
    const e = createInferenceEngine(m, { maxContext: 16 });
    expect(() => e.generate('x'.repeat(16))).toThrow(/context/);
    expect(() => e.generate('hi', { maxTokens: -1 })).toThrow(/maxTokens/);
    void e.close();
  });
});
