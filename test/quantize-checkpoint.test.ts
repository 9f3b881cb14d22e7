// quantizeCheckpoint and `mlx-bun quantize`: the written directory read back through the
// validating safetensors reader (lib/artifacts), tensor names / dtypes / shapes as mlx-lm writes
// them, config keys, mixed precision, tied heads, atomic output on abort and errors.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { inspectCheckpoint, readTensor } from '../lib/artifacts/index.js';
import { run as quantizeCli } from '../lib/cli/commands/quantize.js';
import { native } from '../lib/native/index.js';
import { quantizeCheckpoint } from '../lib/quantize/index.js';
import { toFloat32 } from '../lib/quantize/dtype.js';
import type { NativeFloatDtype } from '../types/native/quant.js';

const FIX = join(import.meta.dirname, 'fixtures', 'models');
const work = mkdtempSync(join(tmpdir(), 'mlxb-quantize-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const nativeName = (d: string): NativeFloatDtype => (d === 'F32' ? 'float32' : d === 'F16' ? 'float16' : 'bfloat16');

async function dequantized(dir: string, module: string, bits: number, groupSize: number): Promise<Float32Array> {
  const w = await readTensor(dir, `${module}.weight`);
  const s = await readTensor(dir, `${module}.scales`);
  const b = await readTensor(dir, `${module}.biases`);
  const half = (t: { data: Uint8Array }) => new Uint16Array(new Uint8Array(t.data).buffer);
  const f32 = (t: { data: Uint8Array }) => new Float32Array(new Uint8Array(t.data).buffer);
  return native().dequantizeAffine({
    packed: new Uint32Array(new Uint8Array(w.data).buffer),
    scales: s.dtype === 'F32' ? f32(s) : half(s),
    biases: b.dtype === 'F32' ? f32(b) : half(b),
    scaleDtype: nativeName(s.dtype),
    rows: w.shape[0]!, cols: (w.shape[1]! * 32) / bits, bits, groupSize,
  });
}

describe('quantizeCheckpoint', () => {
  it('writes an MLX-format 4-bit checkpoint mlx-lm would load (llama, float32)', async () => {
    const out = join(work, 'llama_q4');
    const seen: number[] = [];
    const r = await quantizeCheckpoint(join(FIX, 'llama'), out, { bits: 4, groupSize: 64, onProgress: (p) => seen.push(p.done / p.total) });
    expect(r.quantizedLayers).toBe(2 * 7 + 2);  // q k v o gate up down per layer + embed + lm_head
    expect(seen.at(-1)).toBe(1);
    expect(seen.every((v, i) => i === 0 || v >= seen[i - 1]!)).toBe(true);
    const files = readdirSync(out).sort();
    expect(files).toEqual(['config.alt.json', 'config.json', 'generation_config.json', 'model.safetensors', 'model.safetensors.index.json', 'oracle.json']);
    const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
    expect(cfg.quantization).toEqual({ group_size: 64, bits: 4, mode: 'affine' });
    expect(cfg.quantization_config).toEqual(cfg.quantization);
    const index = JSON.parse(readFileSync(join(out, 'model.safetensors.index.json'), 'utf8'));
    expect(Object.values(index.weight_map).every((f) => f === 'model.safetensors')).toBe(true);

    const src = await inspectCheckpoint(join(FIX, 'llama'));
    const info = await inspectCheckpoint(out);
    expect(info.config.quantization).toEqual({ bits: 4, groupSize: 64 });
    expect(info.metadata['format']).toBe('mlx');
    const byName = new Map(info.tensors.map((t) => [t.name, t]));
    expect(index.metadata.total_size).toBe(info.totalBytes);
    for (const t of src.tensors) {
      if (t.shape.length === 2) {
        const m = t.name.slice(0, -'.weight'.length);
        expect(byName.get(`${m}.weight`)).toMatchObject({ dtype: 'U32', shape: [t.shape[0], t.shape[1]! / 8] });
        expect(byName.get(`${m}.scales`)).toMatchObject({ dtype: 'F32', shape: [t.shape[0], t.shape[1]! / 64] });
        expect(byName.get(`${m}.biases`)).toMatchObject({ dtype: 'F32', shape: [t.shape[0], t.shape[1]! / 64] });
        // The packed weights are MLX's quantization of the original: within one step everywhere.
        const orig = await readTensor(join(FIX, 'llama'), t.name);
        const w = toFloat32(orig.data, 'F32');
        const dq = await dequantized(out, m, 4, 64);
        const scales = toFloat32((await readTensor(out, `${m}.scales`)).data, 'F32');
        let worst = 0;
        for (let i = 0; i < w.length; i++) worst = Math.max(worst, Math.abs(dq[i]! - w[i]!) / (Math.abs(scales[Math.floor(i / 64)]!) + 1e-12));
        expect(worst).toBeLessThanOrEqual(1.0001);
        expect(worst).toBeGreaterThan(0.3);  // and it did quantize
      } else {
        expect(byName.get(t.name)).toMatchObject({ dtype: t.dtype, shape: t.shape });  // norms stay as they are
      }
    }
  });

  it('records per-module overrides for mixed precision (8-bit embeddings and head over 4-bit layers)', async () => {
    const out = join(work, 'llama_mixed');
    await quantizeCheckpoint(join(FIX, 'llama'), out, { bits: 4, groupSize: 64, mixed: [{ match: 'embed_tokens', bits: 8 }, { match: 'lm_head', bits: 8, groupSize: 32 }, { match: 'layers.1.mlp.down_proj', bits: false }] });
    const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
    expect(cfg.quantization).toEqual({
      group_size: 64, bits: 4, mode: 'affine',
      'model.embed_tokens': { group_size: 64, bits: 8, mode: 'affine' },
      'lm_head': { group_size: 32, bits: 8, mode: 'affine' },
      'model.layers.1.mlp.down_proj': false,
    });
    const info = await inspectCheckpoint(out);
    expect(info.config.quantOverrides).toContainEqual({ path: 'lm_head', spec: { bits: 8, groupSize: 32 } });
    const t = new Map(info.tensors.map((x) => [x.name, x]));
    expect(t.get('model.embed_tokens.weight')).toMatchObject({ dtype: 'U32', shape: [256, 16] });
    expect(t.get('lm_head.scales')).toMatchObject({ shape: [256, 2] });
    expect(t.get('model.layers.1.mlp.down_proj.weight')).toMatchObject({ dtype: 'F32', shape: [64, 128] });
    expect(t.has('model.layers.1.mlp.down_proj.scales')).toBe(false);
    expect(t.get('model.layers.0.mlp.down_proj.weight')).toMatchObject({ dtype: 'U32', shape: [64, 16] });
  });

  it("follows mlx-lm's mixed_4_6 recipe", async () => {
    const out = join(work, 'qwen3_mixed');
    await quantizeCheckpoint(join(FIX, 'qwen3'), out, { groupSize: 64, mixed: 'mixed_4_6' });
    const q = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')).quantization;
    // 2 layers: the last eighth starts at layer 1, so layer 1's v_proj/down_proj and lm_head get 6 bits.
    expect(q['model.layers.1.self_attn.v_proj']).toEqual({ group_size: 64, bits: 6, mode: 'affine' });
    expect(q['model.layers.1.mlp.down_proj']).toEqual({ group_size: 64, bits: 6, mode: 'affine' });
    expect(q['model.layers.0.mlp.down_proj']).toEqual({ group_size: 64, bits: 4, mode: 'affine' });
    expect(q['lm_head']).toEqual({ group_size: 64, bits: 6, mode: 'affine' });
    expect(q['model.embed_tokens']).toEqual({ group_size: 64, bits: 4, mode: 'affine' });
    const info = await inspectCheckpoint(out);
    expect(info.tensors.find((t) => t.name === 'lm_head.weight')).toMatchObject({ shape: [256, (64 * 6) / 32] });
  });

  it('drops a tied lm_head and keeps bfloat16 scales for bfloat16 checkpoints (gemma3_text)', async () => {
    const out = join(work, 'gemma3_q8');
    await quantizeCheckpoint(join(FIX, 'gemma3_text'), out, { bits: 8, groupSize: 32 });
    const info = await inspectCheckpoint(out);
    const names = info.tensors.map((t) => t.name);
    expect(names).not.toContain('lm_head.weight');
    expect(info.tensors.find((t) => t.name === 'model.embed_tokens.scales')).toMatchObject({ dtype: 'BF16' });
    expect(info.tensors.filter((t) => t.name.endsWith('norm.weight')).every((t) => t.dtype === 'BF16')).toBe(true);
  });

  it('writes nothing on abort and on errors; rejects bad options with typed errors', async () => {
    const out = join(work, 'aborted');
    const ac = new AbortController();
    await expect(quantizeCheckpoint(join(FIX, 'llama'), out, { signal: ac.signal, onProgress: () => ac.abort() })).rejects.toMatchObject({ code: 'ABORTED' });
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(work).filter((n) => n.includes('quantize-tmp'))).toEqual([]);
    await expect(quantizeCheckpoint(join(FIX, 'llama'), out, { bits: 7 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(quantizeCheckpoint(join(FIX, 'llama'), out, { groupSize: 48 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(quantizeCheckpoint(join(FIX, 'llama'), join(work, 'llama_q4'))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'outDir' });
    await expect(quantizeCheckpoint(join(work, 'llama_q4'), out)).rejects.toMatchObject({ code: 'UNSUPPORTED' });
    await expect(quantizeCheckpoint(join(work, 'missing'), out)).rejects.toMatchObject({ code: 'IO' });
    expect(existsSync(out)).toBe(false);
  });
});

describe('mlx-bun quantize', () => {
  const io = () => {
    const o = { out: '', err: '' };
    return { o, io: { stdout: { write: (s: string) => (o.out += s) }, stderr: { write: (s: string) => (o.err += s) } } };
  };
  it('quantizes with --bits/--group-size/--mixed and reports the result', async () => {
    const { o, io: sink } = io();
    const out = join(work, 'cli_q');
    const code = await quantizeCli(['--model', join(FIX, 'qwen3'), '--out', out, '--bits', '8', '--group-size', '32', '--mixed', 'lm_head=4:64,embed_tokens=none'], sink);
    expect(code).toBe(0);
    expect(o.out).toMatch(/quantized layers/);
    const q = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')).quantization;
    expect(q).toMatchObject({ bits: 8, group_size: 32, lm_head: { bits: 4, group_size: 64, mode: 'affine' }, 'model.embed_tokens': false });
  });
  it('exits 2 with usage on bad flags and 1 on bad values', async () => {
    const a = io();
    expect(await quantizeCli(['--model', 'x'], a.io)).toBe(2);
    expect(a.o.err).toMatch(/usage/);
    const b = io();
    expect(await quantizeCli(['--model', join(FIX, 'qwen3'), '--out', join(work, 'never'), '--bits', '9'], b.io)).toBe(1);
    expect(b.o.err).toMatch(/bits/);
    const c = io();
    expect(await quantizeCli(['--model', join(FIX, 'qwen3'), '--out', join(work, 'never'), '--mixed', 'lm_head'], c.io)).toBe(1);
  });
});
