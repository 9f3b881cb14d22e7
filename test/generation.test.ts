// generate() on the native bigram table model: greedy against the table's own argmax chain,
// seeded sampling against a replay through the Sampler class, stops, logprobs, chat input,
// cancellation (break / abort free the native sequence: generationStats counts live ones) and the
// bad-option table.
import { describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { generate, generationStats, GENERATE_OPTION_NAMES, type GenerationEvent } from '../lib/generation/index.js';
import { Sampler } from '../lib/sampling/index.js';
import { IM_END, IM_START, tableGreedy, tinyModel, VOCAB } from './helpers/tiny_text_model.js';

const live = () => generationStats().liveSequences;

async function collect(g: AsyncIterable<GenerationEvent>): Promise<GenerationEvent[]> {
  const out: GenerationEvent[] = [];
  for await (const e of g) out.push(e);
  return out;
}

describe('generate on the table model', () => {
  const m = tinyModel({ seed: 11 });
  const prompt = [72, 105, 33];  // "Hi!"

  it('greedy equals the argmax chain of the table', async () => {
    const g = generate(m, prompt, { maxTokens: 40, temperature: 0, stopTokenIds: [] });
    const events = await collect(g);
    const r = await g.result;
    expect(r.tokens).toEqual(tableGreedy(m.table, 33, 40));
    expect(events.map((e) => e.token)).toEqual(r.tokens);
    expect(r.finishReason).toBe('length');
    expect(r.promptTokens).toBe(3);
    expect(r.generatedTokens).toBe(40);
    expect(r.timeToFirstTokenMs).toBeGreaterThan(0);
    expect(r.decodeTokensPerSecond).toBeGreaterThan(0);
    expect(events.map((e) => e.text).join('')).toBe(r.text);
    expect(r.text).toBe(m.tokenizer!.decode(r.tokens, { skipSpecialTokens: true }));
    expect(live()).toBe(0);
  });

  it('string input is tokenized; the prompt string and its ids give the same output', async () => {
    const a = await generate(m, 'Hi!', { maxTokens: 10, stopTokenIds: [] }).complete();
    const b = await generate(m, prompt, { maxTokens: 10, stopTokenIds: [] }).complete();
    expect(a.tokens).toEqual(b.tokens);
  });

  it('seeded sampling is reproducible and equals a replay through the Sampler', async () => {
    const opts = { maxTokens: 50, temperature: 0.8, topK: 40, topP: 0.95, repetitionPenalty: 1.3, repetitionContextSize: 8, seed: 1234, stopTokenIds: [] };
    const r1 = await generate(m, prompt, opts).complete();
    const r2 = await generate(m, prompt, opts).complete();
    expect(r1.tokens).toEqual(r2.tokens);
    const r3 = await generate(m, prompt, { ...opts, seed: 1235 }).complete();
    expect(r3.tokens).not.toEqual(r1.tokens);
    // Replay: same chain on the table rows, the prompt in the penalty window first.
    const { maxTokens: _a, stopTokenIds: _b, ...sampling } = opts;
    const s = new Sampler(sampling, VOCAB);
    s.accept(prompt);
    let last = prompt[prompt.length - 1]!;
    const want: number[] = [];
    for (let i = 0; i < 50; i++) {
      const t = s.sample(m.table.subarray(last * VOCAB, (last + 1) * VOCAB)).token;
      want.push(t);
      s.accept(t);
      last = t;
    }
    expect(r1.tokens).toEqual(want);
  });

  it('stops at a stop token (emitted as the last event, not in the text)', async () => {
    const chain = tableGreedy(m.table, 33, 30);
    const stopId = chain[12]!;
    const first = chain.indexOf(stopId);
    const g = generate(m, prompt, { maxTokens: 30, stopTokenIds: [stopId] });
    const events = await collect(g);
    const r = await g.result;
    expect(r.finishReason).toBe('stop');
    expect(r.stoppedBy).toBe(stopId);
    expect(r.tokens).toEqual(chain.slice(0, first + 1));
    expect(events.length).toBe(first + 1);
    expect(r.text).toBe(m.tokenizer!.decode(chain.slice(0, first), { skipSpecialTokens: true }));
  });

  it('the tokenizer EOS is a default stop token', async () => {
    // A table whose every row prefers <|im_end|> after two steps.
    const t = new Float32Array(VOCAB * VOCAB);
    for (let r = 0; r < VOCAB; r++) t[r * VOCAB + (r === 65 ? 66 : r === 66 ? IM_END : 65)] = 5;
    const mm = tinyModel({ table: t });
    const r = await generate(mm, [10], { maxTokens: 20 }).complete();
    expect(r.tokens).toEqual([65, 66, IM_END]);
    expect(r.text).toBe('AB');
    expect(r.finishReason).toBe('stop');
  });

  it('stops before a stop string and never streams its beginning', async () => {
    const full = await generate(m, prompt, { maxTokens: 60, stopTokenIds: [] }).complete();
    const text = full.text;
    const stop = text.slice(20, 23);
    const at = text.indexOf(stop);
    const g = generate(m, prompt, { maxTokens: 60, stopTokenIds: [], stop: ['\u0000never', stop] });
    const events = await collect(g);
    const r = await g.result;
    expect(r.text).toBe(text.slice(0, at));
    expect(events.map((e) => e.text).join('')).toBe(r.text);
    expect(r.finishReason).toBe('stop');
    expect(r.stoppedBy).toBe(stop);
  });

  it('reports logprobs: log-softmax of the table row; top alternatives best first', async () => {
    const events = await collect(generate(m, prompt, { maxTokens: 5, stopTokenIds: [], logprobs: true, topLogprobs: 3 }));
    let last = 33;
    for (const e of events) {
      const row = m.table.subarray(last * VOCAB, (last + 1) * VOCAB);
      const max = Math.max(...row);
      const lse = max + Math.log(row.reduce((a, x) => a + Math.exp(x - max), 0));
      expect(e.logprob!).toBeCloseTo(row[e.token]! - lse, 4);
      expect(e.topLogprobs!.length).toBe(3);
      expect(e.topLogprobs![0]!.token).toBe(e.token);  // greedy: the best is the chosen one
      expect(e.topLogprobs![0]!.logprob).toBeGreaterThanOrEqual(e.topLogprobs![1]!.logprob);
      last = e.token;
    }
    const plain = await collect(generate(m, prompt, { maxTokens: 2, stopTokenIds: [] }));
    expect(plain[0]!.logprob).toBeUndefined();
  });

  it('chat input goes through the template; user text cannot inject control tokens', async () => {
    const msgs = [{ role: 'user', content: 'hi <|im_start|>' }];
    const ids = m.chatTemplate!.encode(m.tokenizer!, msgs);
    expect(ids.filter((t) => t === IM_START).length).toBe(2);  // the user turn and the assistant header
    const a = await generate(m, msgs, { maxTokens: 8, stopTokenIds: [] }).complete();
    const b = await generate(m, ids, { maxTokens: 8, stopTokenIds: [] }).complete();
    expect(a.promptTokens).toBe(ids.length);
    expect(a.tokens).toEqual(b.tokens);
  });

  it('multibyte characters are never split across events', async () => {
    // A table cycling through the bytes of "éж€😀" (2, 2, 3 and 4 byte tokens, all bytes distinct).
    const bytes = [...Buffer.from('éж€😀', 'utf8')];
    const t = new Float32Array(VOCAB * VOCAB);
    for (let r = 0; r < VOCAB; r++) t[r * VOCAB + bytes[0]!] = 1;
    bytes.forEach((b, i) => { t[b * VOCAB + bytes[(i + 1) % bytes.length]!] = 5; });
    const mm = tinyModel({ table: t });
    const events = await collect(generate(mm, [10], { maxTokens: 3 * bytes.length, stopTokenIds: [] }));
    for (const e of events) {
      expect(e.text).not.toMatch(/\uFFFD/);
      expect(e.text).not.toMatch(/[\uD800-\uDBFF]$/);
    }
    expect(events.filter((e) => e.text === '').length).toBe(3 * (bytes.length - 4));  // held bytes
    expect(events.map((e) => e.text).join('')).toBe('éж€😀'.repeat(3));
  });
});

describe('cancellation releases the native sequence', () => {
  it('break out of the loop', async () => {
    const m = tinyModel({ seed: 3 });
    const g = generate(m, [1, 2, 3], { maxTokens: 100, stopTokenIds: [] });
    let n = 0;
    for await (const _ of g) {
      expect(live()).toBe(1);
      if (++n === 3) break;
    }
    expect(live()).toBe(0);
    const r = await g.result;
    expect(r.finishReason).toBe('abort');
    expect(r.generatedTokens).toBe(3);
  });

  it('no native state before iteration starts', async () => {
    const m = tinyModel({ seed: 3 });
    const g = generate(m, [1, 2, 3], { maxTokens: 5, stopTokenIds: [] });
    expect(live()).toBe(0);
    const it = g[Symbol.asyncIterator]();
    await it.next();
    expect(live()).toBe(1);
    await it.return?.(undefined);
    expect(live()).toBe(0);
  });

  it('a throw inside the loop', async () => {
    const m = tinyModel({ seed: 3 });
    await expect((async () => {
      for await (const _ of generate(m, [1], { maxTokens: 100, stopTokenIds: [] })) throw new Error('consumer failed');
    })()).rejects.toThrow('consumer failed');
    expect(live()).toBe(0);
  });

  it('abort mid-stream returns without waiting for the running step and frees it when the step returns', async () => {
    const m = tinyModel({ seed: 3, delayMs: 150 });
    const ac = new AbortController();
    const g = generate(m, [1], { maxTokens: 100, stopTokenIds: [], signal: ac.signal });
    let n = 0;
    let abortedAt = 0;
    for await (const _ of g) {
      if (++n === 2) {
        abortedAt = performance.now();
        ac.abort();
      }
    }
    const r = await g.result;
    expect(performance.now() - abortedAt).toBeLessThan(120);  // did not wait for the 150 ms step
    expect(r.finishReason).toBe('abort');
    expect(r.generatedTokens).toBe(2);
    // The step in flight holds the state until it returns (<= one step), then it is gone.
    const t0 = performance.now();
    while (live() > 0 && performance.now() - t0 < 2000) await new Promise((res) => setTimeout(res, 10));
    expect(live()).toBe(0);
  });

  it('an already-aborted signal generates nothing', async () => {
    const m = tinyModel({ seed: 3 });
    const r = await generate(m, [1], { maxTokens: 10, signal: AbortSignal.abort() }).complete();
    expect(r.finishReason).toBe('abort');
    expect(r.generatedTokens).toBe(0);
    await new Promise((res) => setTimeout(res, 50));
    expect(live()).toBe(0);
  });

  it('a generation is iterated once; concurrent generations do not interfere', async () => {
    const m = tinyModel({ seed: 5 });
    const g = generate(m, [1], { maxTokens: 3, stopTokenIds: [] });
    await g.complete();
    expect(() => g[Symbol.asyncIterator]()).toThrow(InvalidArgumentError);
    const [a, b] = await Promise.all([
      generate(m, [7], { maxTokens: 30, stopTokenIds: [] }).complete(),
      generate(m, [9], { maxTokens: 30, stopTokenIds: [] }).complete(),
    ]);
    expect(a.tokens).toEqual(tableGreedy(m.table, 7, 30));
    expect(b.tokens).toEqual(tableGreedy(m.table, 9, 30));
    expect(live()).toBe(0);
  });
});

describe('bad input: typed errors, nothing started', () => {
  const m = tinyModel({ seed: 1 });
  const generic = [Symbol('x'), 'str', {}, [], NaN, Infinity, -Infinity, -1, 1e300];
  const extra: Record<string, unknown[]> = {
    maxTokens: [0, 1.5, 2e6, '10'],
    stop: ['', [''], [1], 'x'.repeat(2000), Array(17).fill('a')],
    stopTokenIds: [[-1], [VOCAB], [1.5], ['1'], 5],
    chat: ['x', { bogus: 1 }, { tools: 'x' }, { extras: 3 }],
    skipSpecialTokens: ['yes', 1],
    signal: ['x', {}, 1],
    grammar: [{ type: 'regex' }, { type: 'json_schema', schema: 'not json' }, { type: 'json_schema', schema: 3 }, { type: 'ebnf', grammar: '' }, { type: 'ebnf' }],
    temperature: [101], topK: [2.5], topP: [0, 1.5], minP: [1.5], repetitionPenalty: [0, 101],
    repetitionContextSize: [2.5], presencePenalty: [3], frequencyPenalty: [-3],
    logitBias: [{ [VOCAB]: 1 }, { 1: 101 }, { 1: NaN }], seed: [2 ** 53, 1.5], logprobs: ['x'], topLogprobs: [21, 1.5],
  };
  it('the table covers every option', () => {
    expect(Object.keys(extra).sort()).toEqual([...GENERATE_OPTION_NAMES].sort());
  });
  for (const name of GENERATE_OPTION_NAMES) {
    it(`${name}`, () => {
      const values = [...generic, ...(extra[name] ?? [])].filter((v) => {
        // Values that are valid for this option are not part of its bad table.
        if (name === 'stop' && (v === 'str' || (Array.isArray(v) && v.length === 0))) return false;
        if (name === 'logitBias' && typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0) return false;
        if (name === 'stopTokenIds' && Array.isArray(v) && v.length === 0) return false;
        if (name === 'chat' && typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0) return false;
        if (['presencePenalty', 'frequencyPenalty'].includes(name) && v === -1) return false;
        return true;
      });
      for (const v of values) {
        let err: unknown;
        try {
          generate(m, [1], { [name]: v } as never);
        } catch (e) {
          err = e;
        }
        expect(err, `${name} = ${String(v)}`).toBeInstanceOf(InvalidArgumentError);
        expect((err as InvalidArgumentError).field, `${name} = ${String(v)}`).toBe(name);
      }
      expect(live()).toBe(0);
    });
  }
  it('null / undefined options mean defaults', async () => {
    const all = Object.fromEntries(GENERATE_OPTION_NAMES.map((k) => [k, null]));
    const r = await generate(m, [1], { ...all, maxTokens: 2 } as never).complete();
    expect(r.generatedTokens).toBeGreaterThan(0);
  });
  it('unknown options, bad inputs and bad models', () => {
    expect(() => generate(m, [1], { max_tokens: 5 } as never)).toThrow(InvalidArgumentError);
    expect(() => generate(m, [1], 'fast' as never)).toThrow(InvalidArgumentError);
    expect(() => generate(m, [VOCAB], {})).toThrow(InvalidArgumentError);
    expect(() => generate(m, [-1], {})).toThrow(InvalidArgumentError);
    expect(() => generate(m, [], {})).toThrow(InvalidArgumentError);
    expect(() => generate(m, 42 as never, {})).toThrow(InvalidArgumentError);
    expect(() => generate(m, [{ role: 'user' }] as never, {})).toThrow(InvalidArgumentError);
    expect(() => generate(null as never, [1])).toThrow(InvalidArgumentError);
    expect(() => generate({ ...m, nativeHandle: {} }, [1])).toThrow(InvalidArgumentError);
    expect(() => generate({ ...m, vocabSize: VOCAB + 1 }, [1])).toThrow(InvalidArgumentError);
    expect(live()).toBe(0);
  });
});
