// Final hidden states and pooled embeddings on the CPU. The reference is independent of our
// kernels: for every family's oracle fixture, our hidden states times the LM head's weights (read
// from the safetensors file here, multiplied in float64) must give transformers' logits (L0 of
// DESIGN.md: 1e-4 of the row's largest |logit|). Pooling, truncation, normalisation, the
// tokenizer's terminator, the sentence-transformers profile and the typed errors are then checked
// against those hidden states and against the real Qwen3 tokenizer.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { embed, embedMany, loadEmbeddingProfile, withInstruction } from '../lib/embeddings/index.js';
import { AbortError, InvalidArgumentError, InvalidFileError, UnsupportedError } from '../lib/errors.js';
import { loadLanguageModel, type LanguageModel } from '../lib/generation/index.js';
import { loadModel, type Model } from '../lib/models/index.js';
import { forwardSequence, hiddenStates } from '../lib/scoring/index.js';
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';
import { headLogits, readLmHead, worstRelative } from './helpers/lm_head.js';
import { f32, fixtureDir, fixtureNames, oracle, verifyFixture } from './helpers/model-fixtures.js';

const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((s, x) => s + x * x, 0));

describe('hiddenStates against the oracle logits (every fixture, CPU, float32)', () => {
  for (const name of fixtureNames()) {
    it(`${name}: hidden x LM head == transformers' logits`, async () => {
      verifyFixture(name);
      const o = oracle(name);
      const head = readLmHead(fixtureDir(name));
      await using m = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
      expect([head.vocab, head.hidden]).toEqual([o.vocab_size, m.config.hiddenSize]);
      const hidden = await hiddenStates(m, o.prompt_ids);
      expect(hidden.length).toBe(o.prompt_ids.length * m.config.hiddenSize);
      // Measured ~1e-6 on every fixture; the bar is L0's.
      expect(worstRelative(headLogits(head, hidden), f32(name, 'logits.f32'), o.vocab_size)).toBeLessThan(1e-4);
    });
  }
});

describe('the context limit', () => {
  it('dynamic NTK rope runs past maxPositionEmbeddings; other models refuse inputs longer than it', async () => {
    await using dyn = await loadModel(fixtureDir('llama_dynamic'), { device: 'cpu', dtype: 'float32' });
    const ids = oracle('llama_dynamic').prompt_ids;
    expect(ids.length).toBeGreaterThan(dyn.config.maxPositionEmbeddings);
    const e = await embed({ model: dyn }, ids, { normalize: false });
    const H = dyn.config.hiddenSize;
    const hidden = await hiddenStates(dyn, ids);
    for (let j = 0; j < H; j++) expect(e.embedding[j]).toBeCloseTo(hidden[(ids.length - 1) * H + j]!, 5);
    await using q = await loadModel(fixtureDir('qwen3'), { device: 'cpu', dtype: 'float32' });
    const long = new Array<number>(q.config.maxPositionEmbeddings + 1).fill(5);
    await expect(embed({ model: q }, long)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('pooled embeddings (qwen3 fixture, token ids)', () => {
  let m: Model;
  let ids: number[];
  let hidden: Float32Array;
  let H: number;
  beforeAll(async () => {
    m = await loadModel(fixtureDir('qwen3'), { device: 'cpu', dtype: 'float32' });
    ids = oracle('qwen3').prompt_ids.slice(0, 12);
    hidden = await hiddenStates(m, ids);
    H = m.config.hiddenSize;
  });
  afterAll(() => m.dispose());
  const target = () => ({ model: m });

  it('last: the last row of the hidden states, L2-normalised', async () => {
    const e = await embed(target(), ids);
    const last = hidden.subarray((ids.length - 1) * H, ids.length * H);
    const n = norm(last);
    expect(e.tokens).toBe(ids.length);
    expect(e.embedding.length).toBe(H);
    for (let j = 0; j < H; j++) expect(e.embedding[j]).toBeCloseTo(last[j]! / n, 6);
    expect(norm(e.embedding)).toBeCloseTo(1, 6);
  });

  it('mean and cls: the average of the rows and the first row', async () => {
    const mean = await embed(target(), ids, { pooling: 'mean', normalize: false });
    const cls = await embed(target(), ids, { pooling: 'cls', normalize: false });
    for (let j = 0; j < H; j++) {
      let s = 0;
      for (let t = 0; t < ids.length; t++) s += hidden[t * H + j]!;
      expect(mean.embedding[j]).toBeCloseTo(s / ids.length, 5);
      expect(cls.embedding[j]).toBeCloseTo(hidden[j]!, 5);
    }
    // cls reads one token: the first row does not depend on what follows (causal attention).
    expect(cls.tokens).toBe(ids.length);
  });

  it('dimensions keep the first components, normalised after the cut', async () => {
    const full = await embed(target(), ids, { normalize: false });
    const cut = await embed(target(), ids, { dimensions: 16 });
    const n = norm(full.embedding.subarray(0, 16));
    expect(cut.embedding.length).toBe(16);
    for (let j = 0; j < 16; j++) expect(cut.embedding[j]).toBeCloseTo(full.embedding[j]! / n, 6);
  });

  it('embedMany equals each input alone, in order', async () => {
    const a = ids.slice(0, 5), b = ids, c = ids.slice(3, 9);
    const many = await embedMany(target(), [a, b, c]);
    for (const [i, x] of [a, b, c].entries()) {
      const one = await embed(target(), x);
      expect(Array.from(many[i]!.embedding)).toEqual(Array.from(one.embedding));
      expect(many[i]!.tokens).toBe(x.length);
    }
  });

  it('bad input and options are typed errors naming the field', async () => {
    const bad: Array<[() => Promise<unknown>, string]> = [
      [() => embed(target(), []), 'input'],
      [() => embed(target(), [m.config.vocabSize]), 'input'],
      [() => embed(target(), 'text needs a tokenizer'), 'input'],
      [() => embed(target(), ids, { pooling: 'max' as never }), 'pooling'],
      [() => embed(target(), ids, { dimensions: 0 }), 'dimensions'],
      [() => embed(target(), ids, { dimensions: H + 1 }), 'dimensions'],
      [() => embed(target(), ids, { normalise: true } as never), 'normalise'],
      [() => embedMany(target(), []), 'input'],
      [() => embedMany(target(), [ids, [-1]]), 'input'],
      [() => embed({} as never, ids), 'target'],
    ];
    for (const [f, field] of bad) {
      const e = await f().then(() => undefined, (x: unknown) => x);
      expect(e, field).toBeInstanceOf(InvalidArgumentError);
      expect((e as InvalidArgumentError).field, field).toBe(field);
    }
    const long = new Array(m.config.maxPositionEmbeddings + 1).fill(1);
    await expect(embed(target(), long)).rejects.toThrow(/context/);
  });

  it('an aborted signal rejects with AbortError before any work', async () => {
    const ac = new AbortController();
    ac.abort();
    await expect(embedMany(target(), [ids, ids], { signal: ac.signal })).rejects.toBeInstanceOf(AbortError);
  });

  it('a disposed model is an InvalidArgumentError', async () => {
    const m2 = await loadModel(fixtureDir('qwen3'), { device: 'cpu', dtype: 'float32' });
    m2.dispose();
    await expect(embed({ model: m2 }, ids)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('logits of forwardSequence are unchanged by the hidden-state path (same graph)', async () => {
    const logits = await forwardSequence(m, ids);
    const again = await forwardSequence(m, ids);
    expect(Array.from(again)).toEqual(Array.from(logits));
  });
});

describe('text embeddings with the real Qwen3 tokenizer (demo checkpoint)', () => {
  let tmp: string;
  let lm: LanguageModel;
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'mlxb-embed-'));
    const dir = makeTinyCheckpoint(join(tmp, 'tiny')) as string;
    lm = await loadLanguageModel(dir, { device: 'cpu' });
  }, 120_000);
  afterAll(() => {
    lm?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('a string is its tokens plus the post-processor suffix, pooled at the last one', async () => {
    const tok = lm.tokenizer!;
    const text = 'The capital of France is Paris.';
    const ids = tok.encode(text);
    const suffix = [...tok.sequenceSuffix];
    const e = await embed(lm, text);
    const byIds = await embed(lm, [...ids, ...suffix]);
    expect(e.tokens).toBe(ids.length + suffix.length);
    expect(Array.from(e.embedding)).toEqual(Array.from(byIds.embedding));
    // Without the suffix the input is the plain tokens.
    const plain = await embed(lm, text, { appendSuffix: false });
    expect(Array.from(plain.embedding)).toEqual(Array.from((await embed(lm, ids)).embedding));
  });

  it("a terminator the post-processor appends (Qwen3-Embedding's <|endoftext|>) is the pooled token", async () => {
    // The same checkpoint with tokenizer.json's post-processor appending <|endoftext|>, as
    // embedding checkpoints configure it.
    const src = join(tmp, 'tiny'), dst = join(tmp, 'tiny-embed');
    mkdirSync(dst, { recursive: true });
    for (const f of readdirSync(src)) if (f !== 'tokenizer.json') copyFileSync(join(src, f), join(dst, f));
    const tj = JSON.parse(readFileSync(join(src, 'tokenizer.json'), 'utf8')) as Record<string, unknown>;
    const eot = { id: '<|endoftext|>', type_id: 0 };
    tj.post_processor = {
      type: 'TemplateProcessing',
      single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: eot }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: eot }],
      special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [151643], tokens: ['<|endoftext|>'] } },
    };
    writeFileSync(join(dst, 'tokenizer.json'), JSON.stringify(tj));
    await using lm2 = await loadLanguageModel(dst, { device: 'cpu' });
    const tok = lm2.tokenizer!;
    expect(tok.sequenceSuffix).toEqual([151643]);
    const text = 'A sentence to embed.';
    const plain = tok.encode(text, { addSpecialTokens: false });
    const e = await embed(lm2, text);
    expect(e.tokens).toBe(plain.length + 1);
    expect(Array.from(e.embedding)).toEqual(Array.from((await embed(lm2, [...plain, 151643])).embedding));
    // Already ending with it: not appended twice.
    const again = await embed(lm2, text + '<|endoftext|>');
    expect(again.tokens).toBe(plain.length + 1);
    expect(Array.from(again.embedding)).toEqual(Array.from(e.embedding));
    // And it changes the vector (a different last token).
    const without = await embed(lm2, text, { appendSuffix: false });
    expect(Array.from(without.embedding)).not.toEqual(Array.from(e.embedding));
  });

  it('a prompt and withInstruction are text before the input', async () => {
    const q = withInstruction('Find the answer', 'Where is Paris?');
    expect(q).toBe('Instruct: Find the answer\nQuery:Where is Paris?');
    const a = await embed(lm, 'Where is Paris?', { prompt: 'Instruct: Find the answer\nQuery:' });
    const b = await embed(lm, q);
    expect(Array.from(a.embedding)).toEqual(Array.from(b.embedding));
  });

  it('an empty string with no suffix to append is an error', async () => {
    await expect(embed(lm, '', { appendSuffix: false })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('loadEmbeddingProfile (sentence-transformers files)', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxb-profile-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const dir = (name: string, files: Record<string, unknown>) => {
    const d = join(tmp, name);
    for (const [f, v] of Object.entries(files)) {
      mkdirSync(join(d, f, '..'), { recursive: true });
      writeFileSync(join(d, f), typeof v === 'string' ? v : JSON.stringify(v));
    }
    mkdirSync(d, { recursive: true });
    return d;
  };
  const modules = (...kinds: string[]) => kinds.map((k, i) => ({ idx: i, name: String(i), path: k === 'Pooling' ? '1_Pooling' : '', type: `sentence_transformers.models.${k}` }));

  it('reads pooling, normalisation and prompts', async () => {
    const d = dir('qwen-like', {
      'modules.json': modules('Transformer', 'Pooling', 'Normalize'),
      '1_Pooling/config.json': { word_embedding_dimension: 64, pooling_mode_lasttoken: true, pooling_mode_mean_tokens: false },
      'config_sentence_transformers.json': { prompts: { query: 'Instruct: x\nQuery:', document: '' }, default_prompt_name: null },
    });
    const p = await loadEmbeddingProfile(d);
    expect(p).toEqual({ pooling: 'last', normalize: true, prompts: { query: 'Instruct: x\nQuery:', document: '' } });
  });

  it('no files: nothing set', async () => {
    expect(await loadEmbeddingProfile(dir('plain', {}))).toEqual({ prompts: {} });
  });

  it('mean pooling without Normalize', async () => {
    const d = dir('mean', { 'modules.json': modules('Transformer', 'Pooling'), '1_Pooling/config.json': { pooling_mode_mean_tokens: true } });
    expect(await loadEmbeddingProfile(d)).toMatchObject({ pooling: 'mean', normalize: false });
  });

  it('what cannot be run as written is an UnsupportedError, broken files an InvalidFileError', async () => {
    const dense = dir('dense', { 'modules.json': modules('Transformer', 'Pooling', 'Dense', 'Normalize'), '1_Pooling/config.json': { pooling_mode_mean_tokens: true } });
    await expect(loadEmbeddingProfile(dense)).rejects.toBeInstanceOf(UnsupportedError);
    const max = dir('max', { 'modules.json': modules('Transformer', 'Pooling'), '1_Pooling/config.json': { pooling_mode_max_tokens: true } });
    await expect(loadEmbeddingProfile(max)).rejects.toBeInstanceOf(UnsupportedError);
    const two = dir('two', { 'modules.json': modules('Transformer', 'Pooling'), '1_Pooling/config.json': { pooling_mode_max_tokens: true, pooling_mode_cls_token: true } });
    await expect(loadEmbeddingProfile(two)).rejects.toBeInstanceOf(UnsupportedError);
    await expect(loadEmbeddingProfile(dir('broken', { 'modules.json': '[{' }))).rejects.toBeInstanceOf(InvalidFileError);
    await expect(loadEmbeddingProfile(dir('obj', { 'modules.json': { a: 1 } }))).rejects.toBeInstanceOf(InvalidFileError);
    await expect(loadEmbeddingProfile(dir('nocfg', { 'modules.json': modules('Transformer', 'Pooling') }))).rejects.toBeInstanceOf(InvalidFileError);
    await expect(loadEmbeddingProfile(dir('prompts', { 'config_sentence_transformers.json': { prompts: { q: 1 } } }))).rejects.toBeInstanceOf(InvalidFileError);
  });
});
