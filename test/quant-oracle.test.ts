// L2 (DESIGN.md) for MLX affine-quantized checkpoints written by our own quantizer:
// - our dequantization equals the format's formula bit for bit: the SHA-256 of every dequantized
//   float32 weight matches the one the independent numpy unpacker (scripts/oracle/dequant_oracle.py)
//   computed on the GPU machine;
// - the quantized model's logits match transformers run on those dequantized weights (argmax
//   equal wherever the oracle's top-2 margin exceeds 0.05, mean KL(oracle || ours) <= 1e-3);
// - the bfloat16 hidden-256 fixtures (*_bf16_*) have the shapes the default 4-bit tensor-core CUDA
//   GEMVs take (qgemv_tcp / qgemv_tcf: 16-bit scales, group 64 or 128, K a multiple of 256), so
//   their L2 on CUDA (scripts/cuda/quant-l2-check.mjs, test/cuda-quant.test.ts) runs those kernels.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { inspectCheckpoint, readTensor } from '../lib/artifacts/index.js';
import { native } from '../lib/native/index.js';
import type { NativeFloatDtype } from '../types/native/quant.js';

const ROOT = join(import.meta.dirname, 'fixtures', 'quant');
const manifest = JSON.parse(readFileSync(join(ROOT, 'manifest.json'), 'utf8')) as { fixtures: Record<string, Record<string, string>> };
const NAMES = Object.keys(manifest.fixtures);
const BF16_NAMES = NAMES.filter((n) => n.includes('_bf16_'));

interface Oracle {
  quantization: Record<string, unknown> & { bits: number; group_size: number };
  prompt_ids: number[];
  vocab_size: number;
  prompt_top2_margins: number[];
  greedy_tokens: number[];
  greedy_top2_margins: number[];
  dequant_sha256: Record<string, string>;
}

const oracleOf = (name: string): Oracle => JSON.parse(readFileSync(join(ROOT, name, 'oracle.json'), 'utf8')) as Oracle;

function specOf(o: Oracle, module: string): { bits: number; groupSize: number } {
  const v = o.quantization[module];
  if (v && typeof v === 'object') {
    const s = v as { bits?: number; group_size?: number };
    return { bits: s.bits ?? o.quantization.bits, groupSize: s.group_size ?? o.quantization.group_size };
  }
  return { bits: o.quantization.bits, groupSize: o.quantization.group_size };
}

describe('quantized fixtures', () => {
  it('are the files the oracle saw (SHA-256 manifest)', () => {
    expect(NAMES.length).toBe(10);
    expect(BF16_NAMES.sort()).toEqual(['gemma3_text_bf16_q4', 'llama_bf16_q4', 'qwen3_bf16_q4g128']);
    for (const name of NAMES) {
      const files = readdirSync(join(ROOT, name)).sort();
      expect(files).toEqual(Object.keys(manifest.fixtures[name]!).sort());
      for (const f of files) {
        const h = createHash('sha256').update(readFileSync(join(ROOT, name, f))).digest('hex');
        expect(h, `${name}/${f}`).toBe(manifest.fixtures[name]![f]);
      }
    }
  });

  for (const name of NAMES) {
    it(`${name}: dequantization matches the independent numpy unpacker bit for bit`, async () => {
      const o = oracleOf(name);
      const modules = Object.keys(o.dequant_sha256);
      expect(modules.length).toBeGreaterThan(10);
      for (const m of modules) {
        const { bits, groupSize } = specOf(o, m);
        const dir = join(ROOT, name);
        const [w, s, b] = await Promise.all([readTensor(dir, `${m}.weight`), readTensor(dir, `${m}.scales`), readTensor(dir, `${m}.biases`)]);
        const view = (t: { dtype: string; data: Uint8Array }) => {
          const bytes = new Uint8Array(t.data);
          return t.dtype === 'F32' ? new Float32Array(bytes.buffer) : new Uint16Array(bytes.buffer);
        };
        const scaleDtype: NativeFloatDtype = s.dtype === 'F32' ? 'float32' : s.dtype === 'F16' ? 'float16' : 'bfloat16';
        const deq = native().dequantizeAffine({
          packed: new Uint32Array(new Uint8Array(w.data).buffer), scales: view(s), biases: view(b), scaleDtype,
          rows: w.shape[0]!, cols: (w.shape[1]! * 32) / bits, bits, groupSize,
        });
        const h = createHash('sha256').update(new Uint8Array(deq.buffer, deq.byteOffset, deq.byteLength)).digest('hex');
        expect(h, m).toBe(o.dequant_sha256[m]);
      }
    });
  }

  for (const name of BF16_NAMES) {
    it(`${name}: every quantized linear has the tensor-core GEMV shape (bf16 scales, 4 bits, group 64/128, K % 256 == 0)`, async () => {
      const info = await inspectCheckpoint(join(ROOT, name));
      const cfg = JSON.parse(readFileSync(join(ROOT, name, 'config.json'), 'utf8')) as { quantization: { bits: number; group_size: number } };
      expect(cfg.quantization.bits).toBe(4);
      expect([64, 128]).toContain(cfg.quantization.group_size);
      const byName = new Map(info.tensors.map((t) => [t.name, t]));
      const scales = info.tensors.filter((t) => t.name.endsWith('.scales'));
      // 2 layers x 7 linears + embedding (+ lm_head when untied)
      expect(scales.length).toBeGreaterThanOrEqual(15);
      const ks = new Set<number>();
      for (const s of scales) {
        const m = s.name.slice(0, -'.scales'.length);
        const w = byName.get(`${m}.weight`)!;
        const b = byName.get(`${m}.biases`)!;
        expect([s.dtype, b.dtype, w.dtype], m).toEqual(['BF16', 'BF16', 'U32']);
        const k = (w.shape[1]! * 32) / cfg.quantization.bits;
        expect(k % 256, `${m}: K ${k}`).toBe(0);
        expect(s.shape, m).toEqual([w.shape[0], k / cfg.quantization.group_size]);
        ks.add(k);
      }
      // down_proj's K (the intermediate size) differs from the hidden size: both are covered.
      expect(ks.size).toBeGreaterThanOrEqual(2);
    });
  }
});
