// The generation area drives a loaded model through the native handle (model_ref.h): greedy
// generation (temperature 0) must reproduce the transformers oracle's continuation.
import { describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { generate } from '../lib/generation/index.js';
import { loadModel } from '../lib/models/index.js';
import { nativeModel } from '../lib/models/model.js';
import { fixtureDir, oracle } from './helpers/model-fixtures.js';

describe.each(['mistral', 'gemma2', 'qwen3'])('generate() on %s', (name) => {
  it('greedy tokens equal the oracle where its margin exceeds 1e-3', async () => {
    const o = oracle(name);
    await using model = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
    const target = { nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize };
    const n = o.greedy_tokens.length;
    const r = await generate(target, o.prompt_ids, { temperature: 0, maxTokens: n, stopTokenIds: [] }).complete();
    const cut = o.greedy_top2_margins.findIndex((m) => m <= 1e-3);
    const k = cut < 0 ? n : cut + 1;
    expect(r.tokens.slice(0, k)).toEqual(o.greedy_tokens.slice(0, k));
    expect(r.finishReason).toBe('length');
  });

  it('a disposed model is refused with a typed error', async () => {
    const model = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
    const handle = nativeModel(model);
    model.dispose();
    expect(() => generate({ nativeHandle: handle, vocabSize: model.config.vocabSize }, [1, 2], { maxTokens: 2 })).toThrow(InvalidArgumentError);
  });
});
