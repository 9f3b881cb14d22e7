// Bun smoke test: the built package (dist/) and its Node-API addon load and work under Bun: the
// demo's tiny checkpoint generates greedily, and a grammar-constrained generation (xgrammar in a
// worker thread) gives JSON of the schema; then the process must exit on its own.
// Run by test/bun.test.ts with the `bun` binary from devDependencies; prints one JSON line.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generate, loadLanguageModel } from '../../dist/generation/index.js';
import { native } from '../../dist/native/index.js';
import { makeTinyCheckpoint } from '../../scripts/demo/tiny_checkpoint.mjs';

const info = native().buildInfo();
const tmp = mkdtempSync(join(tmpdir(), 'mlxb-bun-'));
try {
  const lm = await loadLanguageModel(makeTinyCheckpoint(join(tmp, 'tiny')), { device: 'cpu' });
  const plain = await generate(lm, 'Hello', { maxTokens: 8, temperature: 0, stopTokenIds: [] }).complete();
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const json = await generate(lm, [{ role: 'user', content: 'JSON please' }], {
    grammar: { type: 'json_schema', schema }, maxTokens: 30, temperature: 1, seed: 2,
  }).complete();
  lm.dispose();
  const out = {
    runtime: typeof Bun !== 'undefined' ? `bun ${Bun.version}` : 'node', threads: info.threads, cudaBuilt: info.cudaBuilt,
    plainTokens: plain.tokens.length, json: json.text, jsonFinish: json.finishReason,
  };
  console.log(JSON.stringify(out));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
