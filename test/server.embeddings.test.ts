// /v1/embeddings driven by the official `openai` client (base64 by default, float on request),
// on the demo's tiny checkpoint (real Qwen3 tokenizer, random weights): vectors equal the library's
// embed(), OpenAI shapes and errors, alongside chat on the same server; and `mlx-bun embed`.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { main } from '../lib/cli/main.js';
import { embed } from '../lib/embeddings/index.js';
import { createInferenceEngine } from '../lib/execution/index.js';
import { loadLanguageModel, type LanguageModel } from '../lib/generation/index.js';
import { createServer, type RunningServer } from '../lib/server/index.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';

let tmp: string;
let dir: string;
let lm: LanguageModel;
let server: RunningServer;
let bare: RunningServer;
let client: OpenAI;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'mlxb-embed-server-'));
  dir = makeTinyCheckpoint(join(tmp, 'tiny')) as string;
  lm = await loadLanguageModel(dir, { device: 'cpu' });
  const engine = createInferenceEngine(lm, { maxRows: 4, maxQueue: 8, maxContext: 256 });
  server = await createServer({ engine, model: lm, modelId: 'tiny', port: 0, embeddings: { target: lm } });
  bare = await createServer({ engine: createInferenceEngine(lm, { maxRows: 2, maxContext: 64 }), model: lm, modelId: 'tiny', port: 0 });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await server?.close();
  await bare?.close();
  lm?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

async function apiError(p: Promise<unknown>): Promise<APIError> {
  const e = await p.then(() => undefined, (x: unknown) => x);
  expect(e).toBeInstanceOf(APIError);
  return e as APIError;
}

describe('/v1/embeddings via the openai client', () => {
  it('one string: the vector embed() gives (base64, the client default), usage counted', async () => {
    const want = await embed(lm, 'The sky is blue.');
    const r = await client.embeddings.create({ model: 'tiny', input: 'The sky is blue.' });
    expect(r.object).toBe('list');
    expect(r.model).toBe('tiny');
    expect(r.data.length).toBe(1);
    expect(r.data[0]!.index).toBe(0);
    expect(r.data[0]!.embedding).toEqual(Array.from(want.embedding));
    expect(r.usage).toEqual({ prompt_tokens: want.tokens, total_tokens: want.tokens });
  });

  it('several inputs in order, as floats, truncated by dimensions', async () => {
    const inputs = ['first', 'second input', 'a third, longer input text'];
    const r = await client.embeddings.create({ model: 'tiny', input: inputs, encoding_format: 'float', dimensions: 24 });
    expect(r.data.map((d) => d.index)).toEqual([0, 1, 2]);
    let tokens = 0;
    for (const [i, text] of inputs.entries()) {
      const want = await embed(lm, text, { dimensions: 24 });
      expect(r.data[i]!.embedding).toEqual(Array.from(want.embedding));
      tokens += want.tokens;
    }
    expect(r.usage.prompt_tokens).toBe(tokens);
  });

  it('token ids, one list and several', async () => {
    const ids = lm.tokenizer!.encode('hello world');
    const one = await client.embeddings.create({ model: 'tiny', input: ids, encoding_format: 'float' });
    expect(one.data[0]!.embedding).toEqual(Array.from((await embed(lm, ids)).embedding));
    const two = await client.embeddings.create({ model: 'tiny', input: [ids, ids.slice(0, 1)], encoding_format: 'float' });
    expect(two.data.length).toBe(2);
    expect(two.data[1]!.embedding).toEqual(Array.from((await embed(lm, ids.slice(0, 1))).embedding));
  });

  it('errors have OpenAI shapes and name the parameter', async () => {
    let e = await apiError(client.embeddings.create({ model: 'tiny', input: '' }));
    expect([e.status, e.param]).toEqual([400, 'input']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: [] as string[] }));
    expect([e.status, e.param]).toEqual([400, 'input']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: 'x', dimensions: 0 }));
    expect([e.status, e.param]).toEqual([400, 'dimensions']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: 'x', dimensions: 65 }));
    expect([e.status, e.param]).toEqual([400, 'dimensions']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: [[1, 2, 1e9]] }));
    expect([e.status, e.param]).toEqual([400, 'input']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: 'x', encoding_format: 'int8' as never }));
    expect([e.status, e.param]).toEqual([400, 'encoding_format']);
    e = await apiError(client.embeddings.create({ model: 'other', input: 'x' }));
    expect([e.status, e.code]).toEqual([404, 'model_not_found']);
    e = await apiError(client.embeddings.create({ model: 'tiny', input: new Array(5000).fill(1) }));
    expect([e.status, e.param, e.code]).toEqual([400, 'input', 'context_length_exceeded']);
    const noRoute = new OpenAI({ baseURL: `${bare.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    e = await apiError(noRoute.embeddings.create({ model: 'tiny', input: 'x' }));
    expect(e.status).toBe(404);
  });

  it('chat and embeddings served at once', async () => {
    const [chat, emb] = await Promise.all([
      client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0 }),
      client.embeddings.create({ model: 'tiny', input: ['one', 'two'], encoding_format: 'float' }),
    ]);
    expect(chat.choices[0]!.message.content).toBeTypeOf('string');
    expect(emb.data[1]!.embedding).toEqual(Array.from((await embed(lm, 'two')).embedding));
  });
});

function capture() {
  let out = '', err = '';
  return {
    io: {
      stdout: { write: (s: string) => { out += s; return true; } },
      stderr: { write: (s: string) => { err += s; return true; }, isTTY: false },
    },
    out: () => out,
    err: () => err,
  };
}

describe('mlx-bun embed', () => {
  it('prints one JSON line per text, equal to embed()', async () => {
    const c = capture();
    expect(await main(['embed', '-m', dir, '--dimensions', '32', 'alpha', 'beta gamma'], c.io)).toBe(0);
    const lines = c.out().trim().split('\n').map((l) => JSON.parse(l) as { index: number; tokens: number; embedding: number[] });
    expect(lines.map((l) => l.index)).toEqual([0, 1]);
    for (const [i, text] of ['alpha', 'beta gamma'].entries()) {
      const want = await embed(lm, text, { dimensions: 32 });
      expect(lines[i]!.embedding).toEqual(Array.from(want.embedding));
      expect(lines[i]!.tokens).toBe(want.tokens);
    }
  });

  it('takes the checkpoint profile: pooling, normalisation, the default prompt', async () => {
    mkdirSync(join(dir, '1_Pooling'), { recursive: true });
    writeFileSync(join(dir, 'modules.json'), JSON.stringify([
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
      { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
    ]));
    writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ pooling_mode_mean_tokens: true }));
    writeFileSync(join(dir, 'config_sentence_transformers.json'), JSON.stringify({ prompts: { query: 'query: ' }, default_prompt_name: 'query' }));
    try {
      const c = capture();
      expect(await main(['embed', '-m', dir, 'delta'], c.io)).toBe(0);
      const got = (JSON.parse(c.out()) as { embedding: number[] }).embedding;
      const want = await embed(lm, 'delta', { pooling: 'mean', normalize: false, prompt: 'query: ' });
      expect(got).toEqual(Array.from(want.embedding));
      const bad = capture();
      expect(await main(['embed', '-m', dir, '--prompt-name', 'nope', 'delta'], bad.io)).toBe(1);
      expect(bad.err()).toMatch(/no prompt named 'nope'.*query/);
    } finally {
      rmSync(join(dir, 'modules.json'));
      rmSync(join(dir, 'config_sentence_transformers.json'));
      rmSync(join(dir, '1_Pooling'), { recursive: true });
    }
  });

  it('bad flags: a one-line error and status 1, no text: usage and status 2', async () => {
    const c = capture();
    expect(await main(['embed', '-m', dir, '--pooling', 'max', 'x'], c.io)).toBe(1);
    expect(c.err()).toMatch(/^mlx-bun: pooling must be one of last, mean, cls/);
    const d = capture();
    expect(await main(['embed', '-m', dir], d.io)).toBe(2);
    expect(d.err()).toMatch(/usage: mlx-bun embed/);
    const e = capture();
    expect(await main(['embed', '-m', join(tmp, 'missing'), 'x'], e.io)).toBe(1);
    expect(e.err()).toMatch(/^mlx-bun: .*no such directory/);
  });
});
