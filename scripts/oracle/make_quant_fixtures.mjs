#!/usr/bin/env node
// Writes the L2 quantized fixtures: the tiny random-weight checkpoints of test/fixtures/models
// quantized by our own tool (the built package, dist/), into OUT/<name>/ with only what the tests
// and the oracle need (config, weights, index, generation config, the source prompt).
// Then, on the GPU machine: python3 scripts/oracle/dequant_oracle.py OUT ORACLE_OUT
// and copy ORACLE_OUT/<name>/{logits.f32,greedy_logits.f32,oracle.json} into OUT/<name>/.
// Usage: node scripts/oracle/make_quant_fixtures.mjs OUT
import { copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { quantizeCheckpoint } from '../../dist/quantize/index.js';

const out = process.argv[2];
if (!out) {
  console.error('usage: node scripts/oracle/make_quant_fixtures.mjs OUT');
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
for (const [name, from, opts] of FIXTURES) {
  const dir = join(out, name);
  rmSync(dir, { recursive: true, force: true });
  await quantizeCheckpoint(join(src, from), dir, opts);
  for (const extra of ['config.alt.json', 'oracle.json']) rmSync(join(dir, extra), { force: true });
  const oracle = JSON.parse(readFileSync(join(src, from, 'oracle.json'), 'utf8'));
  writeFileSync(join(dir, 'prompt.json'), JSON.stringify({ source: from, prompt_ids: oracle.prompt_ids }));
  console.log(`${name}: from ${from} ${JSON.stringify(opts)}`);
}
