// The OpenAI-compatible server driven by the official `openai` client, as an application would:
// every route, streaming and not, errors with their OpenAI shapes, abort, auth, limits. The model
// is the bigram table model (exact expected outputs from plain generate()).
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { createInferenceEngine, type InferenceEngine } from '../lib/execution/index.js';
import { generate } from '../lib/generation/index.js';
import { createServer, type RunningServer } from '../lib/server/index.js';
import { tinyModel, type TinyModel } from './helpers/tiny_text_model.js';

let model: TinyModel;
let engine: InferenceEngine;
let server: RunningServer;
let client: OpenAI;
const KEY = 'test-key-0123456789';

beforeAll(async () => {
  model = tinyModel({ seed: 11, stopIds: [258] });
  engine = createInferenceEngine(model, { maxRows: 4, maxQueue: 8, maxContext: 512 });
  server = await createServer({ engine, model, modelId: 'tiny', port: 0, apiKey: KEY, heartbeatMs: 20, maxBodyBytes: 64 * 1024 });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
});

afterAll(async () => {
  await server.close();
});

const messages = [{ role: 'user' as const, content: 'Hello there' }];

describe('server via the openai client', () => {
  it('lists the model', async () => {
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(['tiny']);
    expect((await client.models.retrieve('tiny')).id).toBe('tiny');
  });

  it('chat completion (non-streaming) equals generate() with usage', async () => {
    const want = await generate(model, messages, { maxTokens: 12, temperature: 0 }).complete();
    const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 12, temperature: 0 });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]!.message.content).toBe(want.text);
    expect(r.choices[0]!.finish_reason).toBe(want.finishReason === 'length' ? 'length' : 'stop');
    expect(r.usage).toEqual({ prompt_tokens: want.promptTokens, completion_tokens: want.generatedTokens, total_tokens: want.promptTokens + want.generatedTokens });
  });

  it('chat completion streaming: chunks concatenate to the text, usage at the end', async () => {
    const want = await generate(model, messages, { maxTokens: 30, temperature: 0.7, seed: 5 }).complete();
    const stream = await client.chat.completions.create({
      model: 'tiny', messages, max_tokens: 30, temperature: 0.7, seed: 5, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null | undefined;
    let usage;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        text += ch.delta.content ?? '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    expect(text).toBe(want.text);
    expect(finish).toBe(want.finishReason === 'length' ? 'length' : 'stop');
    expect(usage?.completion_tokens).toBe(want.generatedTokens);
  });

  it('completions, streaming and not, with logprobs', async () => {
    const want = await generate(model, 'Once upon', { maxTokens: 10, temperature: 0, logprobs: true, topLogprobs: 2 }).complete();
    const r = await client.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 10, temperature: 0, logprobs: 2 });
    expect(r.object).toBe('text_completion');
    expect(r.choices[0]!.text).toBe(want.text);
    expect(r.choices[0]!.logprobs!.token_logprobs!.length).toBe(want.generatedTokens);
    expect(Object.keys(r.choices[0]!.logprobs!.top_logprobs![0]!).length).toBeLessThanOrEqual(2);
    const s = await client.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 10, temperature: 0, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.text ?? '';
    expect(text).toBe(want.text);
  });

  it('chat logprobs', async () => {
    const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
    const lp = r.choices[0]!.logprobs!.content!;
    expect(lp.length).toBe(r.usage!.completion_tokens);
    expect(lp[0]!.top_logprobs.length).toBe(3);
    expect(lp[0]!.logprob).toBeCloseTo(lp[0]!.top_logprobs[0]!.logprob, 5);  // greedy picks the best
  });

  it('errors have the OpenAI shape: invalid params name the param, context_length_exceeded, unknown model', async () => {
    const err = async (p: Promise<unknown>) => { try { await p; } catch (e) { return e as APIError; } throw new Error('no error'); };
    let e = await err(client.chat.completions.create({ model: 'tiny', messages, temperature: -1 }));
    expect(e.status).toBe(400);
    expect(e.param).toBe('temperature');
    expect(e.type).toBe('invalid_request_error');
    e = await err(client.chat.completions.create({ model: 'tiny', messages, max_tokens: 0 }));
    expect(e.param).toBe('max_tokens');
    e = await err(client.chat.completions.create({ model: 'tiny', messages, top_p: 'high' as never }));
    expect(e.status).toBe(400);
    expect(e.param).toBe('top_p');
    e = await err(client.chat.completions.create({ model: 'tiny', messages, top_p: 1.5 }));
    expect(e.param).toBe('top_p');
    e = await err(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x'.repeat(600) }] }));
    expect(e.code).toBe('context_length_exceeded');
    expect(e.param).toBe('messages');
    e = await err(client.completions.create({ model: 'tiny', prompt: 'y'.repeat(600) }));
    expect(e.code).toBe('context_length_exceeded');
    expect(e.param).toBe('prompt');
    e = await err(client.chat.completions.create({ model: 'other', messages }));
    expect(e.status).toBe(404);
    expect(e.code).toBe('model_not_found');
    e = await err(client.chat.completions.create({ model: 'tiny', messages, n: 2 }));
    expect(e.param).toBe('n');
    e = await err(client.chat.completions.create({ model: 'tiny', messages: [] }));
    expect(e.param).toBe('messages');
  });

  it('auth: every route but /health needs the key; body limit; bad JSON', async () => {
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong-key-0000', maxRetries: 0 });
    await expect(bad.models.list()).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    const h = await fetch(`${server.url}/health`);
    expect(h.status).toBe(200);
    expect((await h.json()).status).toBe('ok');
    const big = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: 'z'.repeat(100_000) }),
    });
    expect(big.status).toBe(413);
    const junk = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{nope',
    });
    expect(junk.status).toBe(400);
    expect((await junk.json()).error.type).toBe('invalid_request_error');
  });

  it('a client abort frees its row within a step; other streams are unaffected', async () => {
    const want = await generate(model, 'keep going', { maxTokens: 40, temperature: 0 }).complete();
    const ac = new AbortController();
    const aborted = (async () => {
      const s = await client.completions.create({ model: 'tiny', prompt: 'abort me', max_tokens: 400, temperature: 0, stream: true }, { signal: ac.signal });
      let n = 0;
      try { for await (const _ of s) { if (++n === 3) ac.abort(); } } catch { /* aborted */ }
      return n;
    })();
    const other = client.completions.create({ model: 'tiny', prompt: 'keep going', max_tokens: 40, temperature: 0 });
    const [n, r] = await Promise.all([aborted, other]);
    expect(n).toBeGreaterThanOrEqual(3);
    expect(r.choices[0]!.text).toBe(want.text);
    for (let i = 0; i < 200 && engine.stats().rows > 0; i++) await new Promise((res) => setTimeout(res, 5));
    const s = engine.stats();
    expect(s.rows).toBe(0);
    expect(s.kvBlocks.free + s.kvBlocks.cached).toBe(s.kvBlocks.total);
  });

  it('refuses a non-loopback bind without an API key', async () => {
    await expect(async () => createServer({ engine, model, modelId: 'tiny', host: '0.0.0.0', port: 0 })).rejects.toThrow(InvalidArgumentError);
  });
});

describe('server under pressure', () => {
  it('answers 429 when the queue is full, SSE heartbeats flow, and /health reports a stall', async () => {
    const slow = tinyModel({ seed: 12, delayMs: 30 });
    const eng = createInferenceEngine(slow, { maxRows: 1, maxQueue: 1, maxContext: 256 });
    const srv = await createServer({ engine: eng, model: slow, modelId: 'slow', port: 0, heartbeatMs: 10, stallMs: 1 });
    const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused-key', maxRetries: 0 });
    // A raw SSE read shows the heartbeat comments between data lines. It holds the only row
    // for about a second (30 tokens of 30 ms).
    const raw = fetch(`${srv.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow', prompt: 'a', max_tokens: 30, stream: true }),
    }).then((r) => r.text());
    for (let i = 0; i < 400 && eng.stats().rows === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(eng.stats().rows).toBe(1);
    const reqs = Array.from({ length: 6 }, () => c.completions.create({ model: 'slow', prompt: 'b', max_tokens: 3 }).then(() => 200, (e: APIError) => e.status));
    // Work is queued and every step takes 30 ms > stallMs: /health must fail.
    let health = 200;
    for (let i = 0; i < 100 && health === 200; i++) {
      health = (await fetch(`${srv.url}/health`)).status;
      if (health === 200) await new Promise((r) => setTimeout(r, 10));
    }
    expect(health).toBe(503);
    const statuses = await Promise.all(reqs);
    expect(statuses).toContain(429);
    expect(statuses).toContain(200);
    const body = await raw;
    expect(body).toContain(': ping');
    expect(body.trim().endsWith('data: [DONE]')).toBe(true);
    await srv.close();
  });
});
