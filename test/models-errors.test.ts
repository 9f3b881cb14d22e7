// Typed errors of the models / scoring / state surface: option validation, bad token ids, broken
// checkpoints (config and tensors disagreeing), use after dispose, concurrent session use.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { BusyError, ConfigError, InvalidArgumentError, InvalidFileError, IoError, UnsupportedError } from '../lib/errors.js';
import { loadModel, type Model } from '../lib/models/index.js';
import { forwardSequence, greedyTokens } from '../lib/scoring/index.js';
import { Session } from '../lib/state/index.js';
import { fixtureDir, oracle } from './helpers/model-fixtures.js';

const NAME = 'llama';
const o = oracle(NAME);

async function rejects(p: Promise<unknown>, cls: new (...a: never[]) => Error, field?: string): Promise<void> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(cls);
  if (field !== undefined) expect((e as { field?: string }).field).toBe(field);
}

function throws(fn: () => unknown, cls: new (...a: never[]) => Error, field?: string): void {
  let e: unknown;
  try {
    fn();
  } catch (err) {
    e = err;
  }
  expect(e).toBeInstanceOf(cls);
  if (field !== undefined) expect((e as { field?: string }).field).toBe(field);
}

/** A copy of the fixture with config.json edited (and optionally the weights replaced). */
function brokenCopy(edit: (cfg: Record<string, unknown>) => void, from = NAME): string {
  const dir = mkdtempSync(join(tmpdir(), 'mlxb-broken-'));
  cpSync(fixtureDir(from), dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  edit(cfg);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}

describe('loadModel options', () => {
  it('rejects bad options with InvalidArgumentError naming the option', async () => {
    await rejects(loadModel(fixtureDir(NAME), { device: 'tpu' as never }), InvalidArgumentError, 'device');
    await rejects(loadModel(fixtureDir(NAME), { dtype: 'int8' as never }), InvalidArgumentError, 'dtype');
    await rejects(loadModel(fixtureDir(NAME), { onProgress: 3 as never }), InvalidArgumentError, 'onProgress');
    await rejects(loadModel(fixtureDir(NAME), { colour: 'red' } as never), InvalidArgumentError, 'colour');
    await rejects(loadModel('' as string), InvalidArgumentError, 'dir');
    await rejects(loadModel(fixtureDir(NAME), null as never), InvalidArgumentError, 'options');
  });

  it('reports monotone progress ending at 1 before the load resolves', async () => {
    const seen: number[] = [];
    const phases: string[] = [];
    await using m = await loadModel(fixtureDir(NAME), {
      device: 'cpu',
      dtype: 'float32',
      onProgress: (p) => {
        seen.push(p.fraction);
        phases.push(p.phase);
      },
    });
    expect(m.config.numLayers).toBe(2);
    expect(seen.at(-1)).toBe(1);
    expect(phases.at(-1)).toBe('done');
    const n = seen.length;
    await new Promise((r) => setTimeout(r, 20));
    expect(seen.length).toBe(n);  // nothing arrives after the load resolved
    for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThanOrEqual(seen[i - 1]!);
  });

  it('a missing directory is an IoError', async () => {
    await rejects(loadModel(join(tmpdir(), 'mlxb-no-such-model-dir'), { device: 'cpu' }), IoError);
  });
});

describe('broken checkpoints', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  const copy = (edit: (cfg: Record<string, unknown>) => void, from = NAME) => {
    const d = brokenCopy(edit, from);
    dirs.push(d);
    return d;
  };

  it('config and tensor shapes disagreeing is InvalidFileError naming the tensor', async () => {
    await rejects(loadModel(copy((c) => (c.vocab_size = 255)), { device: 'cpu' }), InvalidFileError, 'model.embed_tokens.weight');
    await rejects(loadModel(copy((c) => (c.intermediate_size = 96)), { device: 'cpu' }), InvalidFileError, 'model.layers.0.mlp.gate_proj.weight');
    await rejects(loadModel(copy((c) => (c.num_key_value_heads = 4)), { device: 'cpu' }), InvalidFileError, 'model.layers.0.self_attn.k_proj.weight');
  });

  it('a missing tensor is InvalidFileError naming it', async () => {
    // three layers in the config, two in the file
    await rejects(loadModel(copy((c) => (c.num_hidden_layers = 3)), { device: 'cpu' }), InvalidFileError, 'model.layers.2.input_layernorm.weight');
    // qwen2's fixture ties its head (no lm_head in the file); untying it in the config leaves none
    await rejects(loadModel(copy((c) => (c.tie_word_embeddings = false), 'qwen2'), { device: 'cpu' }), InvalidFileError, 'lm_head.weight');
  });

  it('an unknown model_type is UnsupportedError', async () => {
    await rejects(loadModel(copy((c) => (c.model_type = 'gpt_neox')), { device: 'cpu' }), UnsupportedError, 'model_type');
  });

  it('an impossible config is ConfigError naming the field', async () => {
    await rejects(loadModel(copy((c) => (c.num_attention_heads = 3)), { device: 'cpu' }), ConfigError, 'num_key_value_heads');
  });
});

describe('token ids and disposal', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(fixtureDir(NAME), { device: 'cpu', dtype: 'float32' });
  });
  afterAll(() => model.dispose());

  it('rejects bad ids with InvalidArgumentError', async () => {
    await rejects(forwardSequence(model, []), InvalidArgumentError, 'ids');
    await rejects(forwardSequence(model, [1, o.vocab_size]), InvalidArgumentError, 'ids');
    await rejects(forwardSequence(model, [1, -1]), InvalidArgumentError, 'ids');
    await rejects(forwardSequence(model, [1.5]), InvalidArgumentError, 'ids');
    await rejects(forwardSequence(model, 'abc' as never), InvalidArgumentError, 'ids');
    await rejects(greedyTokens(model, [1, 2], -1), InvalidArgumentError, 'n');
    await rejects(greedyTokens(model, [1, 2], 1.5), InvalidArgumentError, 'n');
    await rejects(forwardSequence({} as never, [1]), InvalidArgumentError, 'model');
  });

  it('the native layer checks ids too (typed, no crash)', async () => {
    // bypass the facade: the addon must still refuse out-of-vocabulary ids
    const { nativeModel } = await import('../lib/models/model.js');
    const h = nativeModel(model);
    await rejects(h.forward(new Int32Array([o.vocab_size + 7]), true), InvalidArgumentError, 'ids');
    await rejects(h.greedy(new Int32Array([-3]), 2), InvalidArgumentError, 'ids');
    throws(() => h.forward(new Float32Array([1]) as never, true), InvalidArgumentError, 'ids');
    throws(() => h.forward(new Int32Array(0), true), InvalidArgumentError, 'ids');
    throws(() => h.greedy(new Int32Array([1]), -1), InvalidArgumentError, 'n');
    throws(() => h.createSession(0), InvalidArgumentError, 'maxTokens');
  });

  it('greedy of 0 tokens is empty; logits rows are [T, vocab]', async () => {
    expect(await greedyTokens(model, [3, 4], 0)).toEqual([]);
    expect((await forwardSequence(model, new Int32Array([3, 4, 5]))).length).toBe(3 * o.vocab_size);
  });

  it('sessions enforce maxTokens and one forward at a time', async () => {
    using s = new Session(model, { maxTokens: 4 });
    const p = s.forward([1, 2]);
    await rejects(s.forward([3]), BusyError, 'session');
    await p;
    expect(s.length).toBe(2);
    await rejects(s.forward([1, 2, 3]), InvalidArgumentError, 'ids');
    s.reset();
    expect(s.length).toBe(0);
    throws(() => new Session(model, { maxTokens: 0 }), InvalidArgumentError, 'maxTokens');
  });

  it('use after dispose is a typed error, never a crash', async () => {
    const m = await loadModel(fixtureDir(NAME), { device: 'cpu', dtype: 'float32' });
    const s = new Session(m, { maxTokens: 8 });
    await s.forward([1, 2]);
    const pending = forwardSequence(m, o.prompt_ids);  // running work keeps the weights alive
    m.dispose();
    expect((await pending).length).toBe(o.prompt_ids.length * o.vocab_size);
    m.dispose();  // idempotent
    expect(m.disposed).toBe(true);
    await rejects(forwardSequence(m, [1]), InvalidArgumentError, 'model');
    await rejects(greedyTokens(m, [1], 2), InvalidArgumentError, 'model');
    await rejects(s.forward([3]), InvalidArgumentError, 'model');
    throws(() => new Session(m), InvalidArgumentError, 'model');
    s.dispose();
    throws(() => s.reset(), InvalidArgumentError, 'session');
    await rejects(s.forward([1]), InvalidArgumentError, 'session');
  });
});
