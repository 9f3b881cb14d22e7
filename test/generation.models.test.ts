// generate() on real model graphs: greedy decoding through the public generation path (native
// sequence: prefill, then one forward + sample per token) must reproduce the oracle's greedy
// continuation (transformers, float32, test/fixtures/models/*/oracle.json) at every position up
// to the first one whose oracle top-2 margin is within 1e-3 (where float rounding may flip it).
import { describe, expect, it } from 'vitest';

import { generate, generationStats, loadLanguageModel } from '../lib/generation/index.js';
import { fixtureDir, fixtureNames, oracle, verifyFixture } from './helpers/model-fixtures.js';

describe.each(fixtureNames())('greedy generate on %s', (name) => {
  it('equals the oracle continuation', async () => {
    verifyFixture(name);
    const o = oracle(name);
    const lm = await loadLanguageModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
    try {
      const n = o.greedy_tokens.length;
      const r = await generate(lm, o.prompt_ids, { maxTokens: n, temperature: 0, stopTokenIds: [] }).complete();
      let sure = o.greedy_top2_margins.findIndex((m) => m <= 1e-3);
      if (sure < 0) sure = n;
      expect(sure).toBeGreaterThan(8);
      expect(r.tokens.slice(0, sure)).toEqual(o.greedy_tokens.slice(0, sure));
      expect(r.finishReason).toBe('length');
      expect(r.promptTokens).toBe(o.prompt_ids.length);
    } finally {
      lm.dispose();
    }
    expect(generationStats().liveSequences).toBe(0);
  });
});
