// Greedy tokens of N concurrent engine requests (default mode: the recorded batched decode steps),
// printed as one SHA-256 over all of them plus the first tokens of each, so that two processes
// under different settings (e.g. MLXB_GEMM_PDL=0 / 1) can be compared with cmp. Prompts are fixed
// pseudo-random ids; every request is submitted at once, so the step sequence is the same.
// --stops runs the requests a second time, each with a stop id taken from its own first run at a
// different step, and hashes those tokens too (rows then end at different steps). The engine's
// pipelined step count (stats().stepsAhead) goes to stderr.
//   node scripts/cuda/engine-tokens.mjs --device cuda DIR [--n 32] [--gen 48] [--stops]
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';

import { createInferenceEngine } from '../../dist/execution/index.js';
import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    device: { type: 'string', default: 'cuda' }, n: { type: 'string', default: '32' }, gen: { type: 'string', default: '48' },
    stops: { type: 'boolean', default: false },
  },
});
const N = Number(a.n), GEN = Number(a.gen);
const model = await loadModel(positionals[0], { device: a.device });
const vocab = model.config.vocabSize;
let s = 4242;
const r = (k) => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s >>> 8) % k; };
const ps = Array.from({ length: N }, (_, i) => Array.from({ length: 40 + ((i * 53) % 200) }, () => r(vocab)));
const engine = createInferenceEngine({ nativeHandle: nativeModel(model), vocabSize: vocab },
  { maxRows: N, blockSize: 16, prefillChunk: 256, batchInvariant: false });
const rs = await Promise.all(ps.map((p) => engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: [] }).complete()));
const h = createHash('sha256');
for (const x of rs) h.update(Int32Array.from(x.tokens));
console.log(`tokens ${h.digest('hex')} (${N} requests x ${GEN})`);
for (const x of rs.slice(0, 4)) console.log(`  ${x.tokens.slice(0, 12).join(' ')}`);
if (a.stops) {
  const stops = rs.map((x, i) => [x.tokens[Math.min(x.tokens.length - 1, 2 + ((i * 7) % (GEN - 2)))]]);
  const rs2 = await Promise.all(ps.map((p, i) => engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: stops[i] }).complete()));
  const h2 = createHash('sha256');
  for (const x of rs2) h2.update(Int32Array.from([...x.tokens, -1]));
  console.log(`tokens with stops ${h2.digest('hex')} (lengths ${rs2.map((x) => x.tokens.length).join(' ')})`);
}
console.error(`steps ${engine.stats().steps}, ahead ${engine.stats().stepsAhead}`);
await engine.close();
model.dispose();
