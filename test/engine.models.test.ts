// The engine on real tiny checkpoints (test/fixtures/models): paged KV, chunked prefill, prefix
// reuse and continuous batching must leave every request's greedy tokens exactly as plain
// generate() computes them alone (contiguous caches, one sequence). Families cover GQA (llama),
// q/k norms (qwen3) and sliding-window layers with soft-capping (gemma3_text, window 6).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { createInferenceEngine } from '../lib/execution/index.js';
import { generate, type GenerationTarget } from '../lib/generation/index.js';
import { loadModel, type Model } from '../lib/models/index.js';
import { nativeModel } from '../lib/models/model.js';
import { fixtureDir } from './helpers/model-fixtures.js';

function prompts(vocab: number, n: number): number[][] {
  let s = 977;
  const r = (k: number) => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s >>> 8) % k; };
  const shared = Array.from({ length: 21 }, () => r(vocab));
  return Array.from({ length: n }, (_, i) => {
    const own = Array.from({ length: 5 + r(40) }, () => r(vocab));
    return i % 3 === 0 ? [...shared, ...own] : own;
  });
}

describe.each(['llama', 'qwen3', 'gemma3_text'])('engine on %s', (name) => {
  let model: Model;
  let target: GenerationTarget;
  let alone: number[][];
  const ps: number[][] = [];
  const GEN = 24;

  beforeAll(async () => {
    model = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
    target = { nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize };
    ps.push(...prompts(model.config.vocabSize, 8));
    alone = [];
    for (const p of ps) alone.push((await generate(target, p, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete()).tokens);
  });
  afterAll(() => model.dispose());

  it('8 concurrent greedy requests equal each run alone (small chunks, prefix cache on)', async () => {
    const engine = createInferenceEngine(target, { maxRows: 8, blockSize: 4, prefillChunk: 8 });
    const rs = await Promise.all(ps.map((p) => engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete()));
    rs.forEach((r, i) => expect(r.tokens, `request ${i}`).toEqual(alone[i]));
    const s = engine.stats();
    expect(s.kvBlocks.used).toBe(0);
    expect(s.kvBlocks.free + s.kvBlocks.cached).toBe(s.kvBlocks.total);
    await engine.close();
  });

  it('a prefix-cache hit gives the output of a miss', async () => {
    const engine = createInferenceEngine(target, { maxRows: 4, blockSize: 4 });
    const p = ps[0]!;
    const first = await engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete();
    const before = engine.stats().cachedPromptTokens;
    const again = await engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete();
    // Shares the 21-token prefix (5 full blocks of 4) with ps[0]; must reuse it too.
    const sharer = await engine.generate(ps[3]!, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete();
    const s = engine.stats();
    expect(s.cachedPromptTokens - before).toBe(Math.floor((p.length - 1) / 4) * 4 + 20);
    expect(first.tokens).toEqual(alone[0]);
    expect(again.tokens).toEqual(alone[0]);
    expect(sharer.tokens).toEqual(alone[3]);
    expect(s.kvBlocks.free + s.kvBlocks.cached).toBe(s.kvBlocks.total);
    expect(s.kvBlocks.cached).toBeGreaterThan(0);
    await engine.close();
  });

  it('cancelling one stream does not change the others', async () => {
    const engine = createInferenceEngine(target, { maxRows: 4, blockSize: 4, prefixCache: false });
    const ac = new AbortController();
    const victim = engine.generate(ps[1]!, { temperature: 0, maxTokens: 200, stopTokenIds: [], signal: ac.signal });
    const others = [0, 2, 4].map((i) => engine.generate(ps[i]!, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete());
    let n = 0;
    for await (const _ of victim) if (++n === 4) ac.abort();
    const rs = await Promise.all(others);
    expect((await victim.result).finishReason).toBe('abort');
    [0, 2, 4].forEach((i, k) => expect(rs[k]!.tokens).toEqual(alone[i]));
    const s = engine.stats();
    expect(s.kvBlocks.free).toBe(s.kvBlocks.total);
    await engine.close();
  });
});
