// Engine batch invariance on a device: greedy tokens of N concurrent requests in the engine vs
// each request alone (alone in the engine, and through plain generate()), in the default mode and
// with batchInvariant. Prints one line per (model, mode) with the number of identical requests;
// exits 1 when batchInvariant concurrent != batchInvariant alone (the guaranteed case).
//   node scripts/cuda/engine-check.mjs --device cuda DIR...
import { parseArgs } from 'node:util';

import { createInferenceEngine } from '../../dist/execution/index.js';
import { generate } from '../../dist/generation/index.js';
import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: { device: { type: 'string', default: 'cuda' }, n: { type: 'string', default: '8' }, gen: { type: 'string', default: '24' } },
});
const N = Number(a.n), GEN = Number(a.gen);
let bad = 0;

function prompts(vocab) {
  let s = 977;
  const r = (k) => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s >>> 8) % k; };
  return Array.from({ length: N }, (_, i) => Array.from({ length: 5 + ((i * 37) % 90) + r(20) }, () => r(vocab)));
}
const firstDiff = (x, y) => { for (let i = 0; i < Math.max(x.length, y.length); i++) if (x[i] !== y[i]) return i; return -1; };
const opts = { temperature: 0, maxTokens: GEN, stopTokenIds: [] };

for (const dir of positionals) {
  const model = await loadModel(dir, { device: a.device });
  const target = { nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize };
  const ps = prompts(model.config.vocabSize);
  const plain = [];
  for (const p of ps) plain.push((await generate(target, p, opts).complete()).tokens);
  for (const batchInvariant of [false, true]) {
    const solo = createInferenceEngine(target, { maxRows: 1, blockSize: 16, prefillChunk: 64, batchInvariant });
    const alone = [];
    for (const p of ps) alone.push((await solo.generate(p, opts).complete()).tokens);
    await solo.close();
    const engine = createInferenceEngine(target, { maxRows: N, blockSize: 16, prefillChunk: 32, prefillBudget: 96, batchInvariant });
    const t0 = performance.now();
    const rs = await Promise.all(ps.map((p) => engine.generate(p, opts).complete()));
    const ms = performance.now() - t0;
    await engine.close();
    const sameAlone = rs.filter((r, i) => firstDiff(r.tokens, alone[i]) < 0).length;
    const samePlain = rs.filter((r, i) => firstDiff(r.tokens, plain[i]) < 0).length;
    const diffs = rs.map((r, i) => firstDiff(r.tokens, alone[i])).filter((d) => d >= 0);
    console.log(`${dir.split('/').pop()} ${a.device} ${batchInvariant ? 'batchInvariant' : 'default'}: concurrent == alone-in-engine ${sameAlone}/${N}` +
      ` (first differences at ${JSON.stringify(diffs)}), concurrent == generate() ${samePlain}/${N}, concurrent run ${ms.toFixed(0)} ms`);
    if (batchInvariant && sameAlone !== N) bad++;
  }
  model.dispose();
}
process.exit(bad ? 1 : 0);
