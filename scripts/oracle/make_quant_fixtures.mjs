#!/usr/bin/env node
// Writes the L2 quantized fixtures, quantized by our own tool (the built package, dist/), into
// OUT/<name>/ with only what the tests and the oracle need (config, weights, index, generation
// config, the source prompt):
// - the tiny float32 / bfloat16 random-weight checkpoints of test/fixtures/models (hidden 64;
//   these take the generic GEMVs: float32 scales or K below 256);
// - bfloat16 random-weight checkpoints written here (make_bf16_source.mjs, seeded; hidden 256,
//   every linear's K a multiple of 256, so bfloat16 scales at group 64 / 128: the shapes the
//   default 4-bit tensor-core CUDA GEMVs qgemv_tcp (M = 1) and qgemv_tcf (M 2-8) take).
// Then, on the GPU machine: python3 scripts/oracle/dequant_oracle.py OUT ORACLE_OUT [name ...]
// and copy ORACLE_OUT/<name>/{logits.f32,greedy_logits.f32,oracle.json} into OUT/<name>/
// (scripts/oracle/l2-new-device.sh does that for the bfloat16 ones).
// Usage: node scripts/oracle/make_quant_fixtures.mjs OUT [name ...]   (default: all)
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { quantizeCheckpoint } from '../../dist/quantize/index.js';
import { writeBf16Source } from './make_bf16_source.mjs';

const out = process.argv[2];
if (!out) {
  console.error('usage: node scripts/oracle/make_quant_fixtures.mjs OUT [name ...]');
  process.exit(2);
}
const src = new URL('../../test/fixtures/models/', import.meta.url).pathname;
const FIXTURES = [
  ['llama_q4', 'llama', { bits: 4, groupSize: 32 }],
  ['llama_q8', 'llama', { bits: 8, groupSize: 64 }],
  ['llama_q4_mixed', 'llama', { bits: 4, groupSize: 64, mixed: [{ match: 'embed_tokens', bits: 8 }, { match: 'lm_head', bits: 8 }] }],
  ['qwen3_q4', 'qwen3', { bits: 4, groupSize: 64 }],
  ['qwen3_q8', 'qwen3', { bits: 8, groupSize: 32 }],
  ['gemma3_text_q4', 'gemma3_text', { bits: 4, groupSize: 64 }],
  ['gemma3_text_q8', 'gemma3_text', { bits: 8, groupSize: 32 }],
];
// name -> family, shape, seed, quantize options. K: q/k/v/gate/up = hidden, o = heads * headDim,
// down = inter; all multiples of 256. Vocab 384 / 512: output rows not a power of two in one.
const BF16_FIXTURES = [
  ['llama_bf16_q4', 'llama', { hidden: 256, inter: 512, layers: 2, heads: 4, kvHeads: 2, headDim: 64, vocab: 512, tied: false }, 31, { bits: 4, groupSize: 64 }],
  ['qwen3_bf16_q4g128', 'qwen3', { hidden: 256, inter: 768, layers: 2, heads: 4, kvHeads: 2, headDim: 64, vocab: 384, tied: false }, 32, { bits: 4, groupSize: 128 }],
  ['gemma3_text_bf16_q4', 'gemma3_text', { hidden: 256, inter: 512, layers: 2, heads: 4, kvHeads: 1, headDim: 64, vocab: 512, tied: true, tiedInputRms: 0.1 }, 36, { bits: 4, groupSize: 64 }],
];
const wanted = new Set(process.argv.slice(3));
const pick = (name) => wanted.size === 0 || wanted.has(name);

for (const [name, from, opts] of FIXTURES) {
  if (!pick(name)) continue;
  const dir = join(out, name);
  rmSync(dir, { recursive: true, force: true });
  await quantizeCheckpoint(join(src, from), dir, opts);
  for (const extra of ['config.alt.json', 'oracle.json']) rmSync(join(dir, extra), { force: true });
  const oracle = JSON.parse(readFileSync(join(src, from, 'oracle.json'), 'utf8'));
  writeFileSync(join(dir, 'prompt.json'), JSON.stringify({ source: from, prompt_ids: oracle.prompt_ids }));
  console.log(`${name}: from ${from} ${JSON.stringify(opts)}`);
}

const work = mkdtempSync(join(tmpdir(), 'mlxb-bf16-src-'));
try {
  for (const [name, family, shape, seed, opts] of BF16_FIXTURES) {
    if (!pick(name)) continue;
    const from = join(work, name);
    const prompt = writeBf16Source(from, family, shape, seed);
    const dir = join(out, name);
    rmSync(dir, { recursive: true, force: true });
    await quantizeCheckpoint(from, dir, opts);
    const source = { generator: 'scripts/oracle/make_bf16_source.mjs', family, shape, seed };
    writeFileSync(join(dir, 'prompt.json'), JSON.stringify({ source, prompt_ids: prompt }));
    console.log(`${name}: ${family} bfloat16 seed ${seed} ${JSON.stringify(shape)} ${JSON.stringify(opts)}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
