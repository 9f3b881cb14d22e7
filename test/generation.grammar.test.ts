// Grammar-constrained generation (xgrammar in a worker) on the demo's tiny checkpoint: the real
// Qwen3 tokenizer and template, random weights, so only the grammar makes the output well-formed.
// Outputs must parse and satisfy the schema for many seeds and temperatures; EBNF alternatives
// hold; bad grammars are typed errors and the engine recovers after one aborts; the batching
// engine refuses grammars; tokenizers report their vocabulary kind; the server's response_format
// works through the openai client.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InvalidArgumentError, UnsupportedError } from '../lib/errors.js';
import { createInferenceEngine } from '../lib/execution/index.js';
import { generate, loadLanguageModel, type LanguageModel } from '../lib/generation/index.js';
import { loadTokenizer } from '../lib/input/index.js';
import { allowed, applyMask } from '../lib/sampling/grammar/index.js';
import { createServer, type RunningServer } from '../lib/server/index.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';
import { TOKENIZERS } from './helpers/tokenizers.js';

let tmp: string;
let lm: LanguageModel;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'mlxb-grammar-'));
  lm = await loadLanguageModel(makeTinyCheckpoint(join(tmp, 'tiny')) as string, { device: 'cpu' });
}, 120_000);
afterAll(() => {
  lm?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

const schema = {
  type: 'object',
  properties: {
    ok: { type: 'boolean' },
    color: { enum: ['red', 'green', 'blue'] },
    n: { type: 'integer', minimum: 0, maximum: 99 },
    tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
  },
  required: ['ok', 'color', 'n', 'tags'],
  additionalProperties: false,
};

function satisfies(v: unknown): boolean {
  const o = v as Record<string, unknown>;
  return o !== null && typeof o === 'object' && !Array.isArray(o) &&
    Object.keys(o).sort().join() === 'color,n,ok,tags' &&
    typeof o.ok === 'boolean' && ['red', 'green', 'blue'].includes(o.color as string) &&
    Number.isInteger(o.n) && (o.n as number) >= 0 && (o.n as number) <= 99 &&
    Array.isArray(o.tags) && o.tags.length <= 3 && o.tags.every((t) => t === 'a' || t === 'b');
}

describe('generate() with a grammar', () => {
  it('every output parses and satisfies the JSON schema (seeds x temperatures)', async () => {
    const seen = new Set<string>();
    for (const temperature of [0, 1, 4]) {
      for (let seed = 1; seed <= 6; seed++) {
        const r = await generate(lm, [{ role: 'user', content: 'Describe a thing as JSON.' }], {
          grammar: { type: 'json_schema', schema }, maxTokens: 80, temperature, seed,
        }).complete();
        expect(r.finishReason, r.text).toBe('stop');
        const v = JSON.parse(r.text) as unknown;
        expect(satisfies(v), r.text).toBe(true);
        seen.add(r.text);
      }
    }
    expect(seen.size).toBeGreaterThan(3);  // sampling still samples, inside the grammar
  }, 120_000);

  it('the same seed gives the same output; events join to the text', async () => {
    const o = { grammar: { type: 'json_schema' as const, schema: JSON.stringify(schema) }, maxTokens: 80, temperature: 2, seed: 9 };
    const a = generate(lm, 'x', o);
    let text = '';
    for await (const e of a) text += e.text;
    const b = await generate(lm, 'x', o).complete();
    expect(text).toBe((await a.result).text);
    expect(b.text).toBe(text);
  });

  it('EBNF alternatives', async () => {
    for (let seed = 1; seed <= 5; seed++) {
      const r = await generate(lm, 'Answer:', { grammar: { type: 'ebnf', grammar: 'root ::= "yes" | "no" | "maybe so"' }, maxTokens: 10, temperature: 3, seed }).complete();
      expect(['yes', 'no', 'maybe so']).toContain(r.text);
      expect(r.finishReason).toBe('stop');
    }
  });

  it('bad grammars are InvalidArgumentError naming grammar; the engine recovers after an abort', async () => {
    const bad = [
      { type: 'ebnf', grammar: 'root ::= ( ' },
      { type: 'json_schema', schema: { type: 'nonsense' } },
    ] as const;
    for (const g of bad) {
      const e = await generate(lm, 'x', { grammar: g, maxTokens: 4 }).complete().then(() => undefined, (x: unknown) => x);
      expect(e, JSON.stringify(g)).toBeInstanceOf(InvalidArgumentError);
      expect((e as InvalidArgumentError).field).toBe('grammar');
    }
    const ok = await generate(lm, 'x', { grammar: { type: 'ebnf', grammar: 'root ::= "ok"' }, maxTokens: 4 }).complete();
    expect(ok.text).toBe('ok');
    for (const g of [{ type: 'regex' }, { type: 'json_schema', schema: 'not json' }, { type: 'ebnf', grammar: '' }, 'json']) {
      expect(() => generate(lm, 'x', { grammar: g as never })).toThrow(InvalidArgumentError);
    }
  });

  it('the batching engine refuses a grammar; a model without tokenizer cannot take one', async () => {
    const engine = createInferenceEngine(lm, { maxRows: 2, maxContext: 64 });
    try {
      expect(() => engine.generate('x', { grammar: { type: 'json' } })).toThrow(UnsupportedError);
    } finally {
      await engine.close();
    }
    const bare = { model: lm.model, nativeHandle: lm.nativeHandle, vocabSize: lm.vocabSize, eosTokenIds: lm.eosTokenIds };
    expect(() => generate(bare, [1, 2, 3], { grammar: { type: 'json' } })).toThrow(UnsupportedError);
  });
});

describe('process lifetime', () => {
  it('a script that used a grammar exits on its own (the idle worker holds nothing)', () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const register = pathToFileURL(join(here, 'support', 'ts-register.mjs')).href;
    const r = spawnSync(process.execPath, ['--import', register, join(here, 'support', 'grammar-exit-child.ts'), join(tmp, 'tiny')], {
      encoding: 'utf8', timeout: 60_000,
    });
    expect(r.error, 'the child did not exit within 60 s').toBeUndefined();
    expect([r.status, r.stdout]).toEqual([0, expect.stringMatching(/^(yes|no)$/)]);
  }, 90_000);
});

describe('applyMask', () => {
  it('keeps exactly the allowed logits (whole words, empty words, partial words, a short last word)', () => {
    for (const n of [1, 31, 32, 33, 100, 4100]) {
      const words = Math.ceil(n / 32);
      const mask = new Int32Array(words);
      for (let w = 0; w < words; w++) mask[w] = w % 3 === 0 ? -1 : w % 3 === 1 ? 0 : (w * 2654435761) | 0;
      const logits = Float32Array.from({ length: n }, (_, i) => i);
      applyMask(logits, mask);
      for (let t = 0; t < n; t++) expect(logits[t], `n ${n} t ${t}`).toBe(allowed(mask, t) ? t : -Infinity);
    }
  });
});

describe('Tokenizer.vocabKind (what xgrammar needs to read token strings)', () => {
  it.each([
    ['qwen3', 'byte_level', false],
    ['llama3', 'byte_level', false],
    ['mistral', 'byte_fallback', true],
    ['gemma3', 'byte_fallback', false],
  ] as const)('%s: %s, prepends a space: %s', async (name, kind, prependsSpace) => {
    const t = await loadTokenizer(TOKENIZERS[name]);
    expect(t.vocabKind).toEqual({ kind, prependsSpace });
  });
});

describe('response_format through the server (openai client)', () => {
  let server: RunningServer;
  let client: OpenAI;
  beforeAll(async () => {
    const engine = createInferenceEngine(lm, { maxRows: 2, maxContext: 256 });
    server = await createServer({ engine, model: lm, modelId: 'tiny', port: 0 });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => { await server?.close(); });

  it('json_schema: the content satisfies the schema, streaming and not', async () => {
    const messages = [{ role: 'user' as const, content: 'JSON please' }];
    const rf = { type: 'json_schema' as const, json_schema: { name: 'thing', schema } };
    const r = await client.chat.completions.create({ model: 'tiny', messages, response_format: rf, max_tokens: 80, temperature: 1.5, seed: 4 });
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(satisfies(JSON.parse(r.choices[0]!.message.content!))).toBe(true);
    const s = await client.chat.completions.create({ model: 'tiny', messages, response_format: rf, max_tokens: 80, temperature: 1.5, seed: 4, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.delta.content ?? '';
    expect(text).toBe(r.choices[0]!.message.content);
  });

  it('json_object gives a JSON object (when it ends on its own); a bad schema is a 400 on response_format', async () => {
    // Random weights may run a key or string to max_tokens ('length', JSON cut short, as OpenAI
    // does too); every output that ends with 'stop' must be an object.
    for (let seed = 1; seed <= 3; seed++) {
      const r = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_object' }, max_tokens: 60, temperature: 1, seed });
      const text = r.choices[0]!.message.content!;
      expect(text.startsWith('{')).toBe(true);
      if (r.choices[0]!.finish_reason !== 'stop') continue;
      const v = JSON.parse(text) as unknown;
      expect(typeof v === 'object' && v !== null && !Array.isArray(v)).toBe(true);
    }
    const e = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'nonsense' } } },
    }).then(() => undefined, (x: unknown) => x);
    expect(e).toBeInstanceOf(APIError);
    expect([(e as APIError).status, (e as APIError).param]).toEqual([400, 'response_format']);
  });
});
