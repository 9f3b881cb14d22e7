// Quantized checkpoints through the model loader: L2 logits of the quantized fixtures against
// transformers on the independently dequantized weights (argmax equal wherever the oracle's
// top-2 margin exceeds 0.05, mean KL(oracle || ours) <= 1e-3, and greedy tokens equal while the
// oracle's margins stay above 0.05), tied heads through the quantized embedding, and malformed
// quantized checkpoints rejected with typed errors naming the tensor.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { inspectCheckpoint, readTensor } from '../lib/artifacts/index.js';
import { native } from '../lib/native/index.js';
import { encodeHeader } from '../lib/quantize/safetensors_write.js';
import { argmax, logSoftmax } from './helpers/logits.js';

const ROOT = join(import.meta.dirname, 'fixtures', 'quant');
const NAMES = Object.keys(JSON.parse(readFileSync(join(ROOT, 'manifest.json'), 'utf8')).fixtures as Record<string, unknown>);
const work = mkdtempSync(join(tmpdir(), 'mlxb-quant-models-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));


describe('quantized models vs transformers on the dequantized weights (L2, CPU)', () => {
  for (const name of NAMES) {
    it(name, async () => {
      const dir = join(ROOT, name);
      const o = JSON.parse(readFileSync(join(dir, 'oracle.json'), 'utf8'));
      const ref = new Float32Array(new Uint8Array(readFileSync(join(dir, 'logits.f32'))).buffer);
      const V = o.vocab_size as number;
      const T = (o.prompt_ids as number[]).length;
      const model = await native().loadModel(dir, { device: 'cpu', dtype: 'auto' });
      try {
        expect(model.config().quantized).toBe(true);
        const ours = await model.forward(Int32Array.from(o.prompt_ids), true);
        expect(ours.length).toBe(T * V);
        let kl = 0;
        let maxRel = 0;
        for (let t = 0; t < T; t++) {
          const r = ref.subarray(t * V, (t + 1) * V);
          const y = ours.subarray(t * V, (t + 1) * V);
          if (o.prompt_top2_margins[t] > 0.05) expect(argmax(y), `row ${t}`).toBe(argmax(r));
          const lp = logSoftmax(r);
          const lq = logSoftmax(y);
          let rowMax = 0;
          for (let v = 0; v < V; v++) {
            kl += Math.exp(lp[v]!) * (lp[v]! - lq[v]!);
            rowMax = Math.max(rowMax, Math.abs(r[v]!));
          }
          for (let v = 0; v < V; v++) maxRel = Math.max(maxRel, Math.abs(y[v]! - r[v]!) / rowMax);
        }
        expect(kl / T).toBeLessThanOrEqual(1e-3);
        expect(maxRel).toBeLessThan(0.05);
        // Greedy decoding (prefill, then one token at a time) follows the oracle while it is decisive.
        const n = (o.greedy_tokens as number[]).length;
        const toks = await model.greedy(Int32Array.from(o.prompt_ids), n);
        for (let i = 0; i < n && o.greedy_top2_margins[i] > 0.05; i++) expect(toks[i], `greedy step ${i}`).toBe(o.greedy_tokens[i]);
      } finally {
        model.dispose();
      }
    });
  }
});

/** Copies a quantized fixture into a fresh directory, editing its config and dropping tensors. */
async function variant(from: string, to: string, edit: (cfg: Record<string, any>) => void, drop: string[] = []): Promise<string> {
  const src = join(ROOT, from);
  const dst = join(work, to);
  rmSync(dst, { recursive: true, force: true });
  const { mkdirSync } = await import('node:fs');
  mkdirSync(dst);
  const cfg = JSON.parse(readFileSync(join(src, 'config.json'), 'utf8'));
  edit(cfg);
  writeFileSync(join(dst, 'config.json'), JSON.stringify(cfg));
  copyFileSync(join(src, 'generation_config.json'), join(dst, 'generation_config.json'));
  const info = await inspectCheckpoint(src);
  const keep = info.tensors.filter((t) => !drop.includes(t.name));
  const datas = await Promise.all(keep.map((t) => readTensor(src, t.name)));
  const header = encodeHeader(keep.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes })), { format: 'mlx' });
  writeFileSync(join(dst, 'model.safetensors'), Buffer.concat([header, ...datas.map((d) => d.data)]));
  return dst;
}

describe('malformed quantized checkpoints', () => {
  it('scales that do not match the group size -> INVALID_FILE naming the scales', async () => {
    const dir = await variant('llama_q4', 'bad_group', (c) => { c.quantization.group_size = 64; c.quantization_config.group_size = 64; });
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'INVALID_FILE', field: expect.stringMatching(/\.scales$/) });
  });
  it('packed weights of another width than the config says -> INVALID_FILE naming the weight', async () => {
    const dir = await variant('llama_q4', 'bad_bits', (c) => { c.quantization.bits = 8; c.quantization_config.bits = 8; });
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'INVALID_FILE', field: expect.stringMatching(/\.weight$/) });
  });
  it('unknown bits -> UNSUPPORTED naming the config field', async () => {
    const dir = await variant('llama_q4', 'bits7', (c) => { c.quantization.bits = 7; c.quantization_config.bits = 7; });
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'UNSUPPORTED', field: expect.stringMatching(/bits/) });
  });
  it('missing biases -> INVALID_FILE naming the biases tensor', async () => {
    const dir = await variant('llama_q4', 'no_biases', () => {}, ['model.layers.0.self_attn.q_proj.biases']);
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'INVALID_FILE', field: 'model.layers.0.self_attn.q_proj.biases' });
  });
  it('missing scales of a packed weight -> INVALID_FILE naming the scales tensor', async () => {
    const dir = await variant('qwen3_q8', 'no_scales', () => {}, ['model.layers.1.mlp.up_proj.scales']);
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'INVALID_FILE', field: 'model.layers.1.mlp.up_proj.scales' });
  });
  it('a module the config keeps in floating point but that holds scales -> INVALID_FILE', async () => {
    const dir = await variant('llama_q4', 'override_false', (c) => { c.quantization['lm_head'] = false; c.quantization_config['lm_head'] = false; });
    await expect(native().loadModel(dir, { device: 'cpu', dtype: 'auto' })).rejects.toMatchObject({ code: 'INVALID_FILE', field: expect.stringMatching(/^lm_head/) });
  });
  it('the untouched copy loads (the variants differ only by the edit)', async () => {
    const dir = await variant('llama_q4', 'same', () => {});
    const m = await native().loadModel(dir, { device: 'cpu', dtype: 'auto' });
    m.dispose();
    expect(readdirSync(dir).sort()).toEqual(['config.json', 'generation_config.json', 'model.safetensors']);
  });
});
