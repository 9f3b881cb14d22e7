// The side lane (requests the engine does not batch: grammar-constrained generation, embeddings).
// RequestLane alone: places go in arrival order, one too many is a BusyError, a waiter that aborts
// leaves the queue. Then through the server, driven by the openai client: with one place and no
// queue, a second grammar request while the first streams is a 429 with retry-after, and once the
// first ends the lane takes requests again; an engine request is not held up by the busy lane.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AbortError, BusyError, InvalidArgumentError } from '../lib/errors.js';
import { createInferenceEngine } from '../lib/execution/index.js';
import { loadLanguageModel, type LanguageModel } from '../lib/generation/index.js';
import { createServer, type RunningServer } from '../lib/server/index.js';
import { RequestLane } from '../lib/server/lane.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';

describe('RequestLane', () => {
  it('runs at most `concurrency` at once, hands places on in arrival order, refuses past the queue', async () => {
    const lane = new RequestLane(2, 2);
    const order: number[] = [];
    const a = await lane.acquire();
    const b = await lane.acquire();
    const c = lane.acquire().then((r) => { order.push(3); return r; });
    const d = lane.acquire().then((r) => { order.push(4); return r; });
    await expect(lane.acquire()).rejects.toBeInstanceOf(BusyError);
    expect([lane.running, lane.waiting]).toEqual([2, 2]);
    b();
    b();  // a second call of the same release does nothing
    const rc = await c;
    expect([order, lane.running, lane.waiting]).toEqual([[3], 2, 1]);
    a();
    const rd = await d;
    expect(order).toEqual([3, 4]);
    rc();
    rd();
    expect([lane.running, lane.waiting]).toEqual([0, 0]);
  });

  it('a waiter whose signal aborts leaves the queue; an aborted signal never waits', async () => {
    const lane = new RequestLane(1, 4);
    const a = await lane.acquire();
    const ac = new AbortController();
    const w = lane.acquire(ac.signal);
    const next = lane.acquire();
    ac.abort();
    await expect(w).rejects.toBeInstanceOf(AbortError);
    expect(lane.waiting).toBe(1);
    a();
    (await next)();
    expect([lane.running, lane.waiting]).toEqual([0, 0]);
    await expect(lane.acquire(AbortSignal.abort())).rejects.toBeInstanceOf(AbortError);
    expect(() => new RequestLane(0, 1)).toThrow(InvalidArgumentError);
    expect(() => new RequestLane(1, -1)).toThrow(InvalidArgumentError);
  });
});

describe('the server\'s side lane', () => {
  let tmp: string;
  let lm: LanguageModel;
  let server: RunningServer;
  let client: OpenAI;
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mlxb-lane-'));
    lm = await loadLanguageModel(makeTinyCheckpoint(join(tmp, 'tiny')) as string, { device: 'cpu' });
    const engine = createInferenceEngine(lm, { maxRows: 2, maxContext: 256 });
    server = await createServer({ engine, model: lm, modelId: 'tiny', port: 0, maxSideRequests: 1, maxSideQueue: 0 });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    lm?.dispose();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('a grammar request past the lane is a 429; an engine request still runs; the lane frees', async () => {
    const messages = [{ role: 'user' as const, content: 'JSON please' }];
    const ask = (stream: boolean) => client.chat.completions.create({
      model: 'tiny', messages, response_format: { type: 'json_object' }, max_tokens: 40, temperature: 1, seed: 3, stream,
    } as never) as unknown;
    const first = await (ask(true) as Promise<AsyncIterable<{ choices: { delta: { content?: string } }[] }>>);
    const it1 = first[Symbol.asyncIterator]();
    await it1.next();  // the first request holds the lane's one place while its stream is open
    const e = await (ask(false) as Promise<unknown>).then(() => undefined, (x: unknown) => x);
    expect(e).toBeInstanceOf(APIError);
    expect((e as APIError).status).toBe(429);
    expect((e as APIError).headers?.get('retry-after')).toBe('1');
    const plain = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 5 });
    expect(plain.choices[0]!.message.content).toBeTypeOf('string');
    const health = await (await fetch(`${server.url}/health`)).json() as { side_running: number; side_queue: number };
    expect([health.side_running, health.side_queue]).toEqual([1, 0]);
    for (let r = await it1.next(); !r.done; r = await it1.next());
    const again = await (ask(false) as Promise<{ choices: { message: { content: string } }[] }>);
    expect(again.choices[0]!.message.content.startsWith('{')).toBe(true);
  }, 60_000);
});
