// Folded norms (MLXB_FOLD_NORMS=1, cpp/models/fold_norms.h) against the unfolded model: one process
// loads each checkpoint twice (the variable is read at load), runs the same N concurrent greedy
// engine requests with logprobs through both and prints how many requests agree token for token,
// where the others first differ, and the largest difference of the chosen token's logprob over
// the steps where both still agree. Prompts are fixed pseudo-random ids.
//   node scripts/cuda/fold-check.mjs --device cuda DIR.. [--n 32] [--gen 32]
import { parseArgs } from 'node:util';

import { createInferenceEngine } from '../../dist/execution/index.js';
import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: { device: { type: 'string', default: 'cuda' }, n: { type: 'string', default: '32' }, gen: { type: 'string', default: '32' } },
});
const N = Number(a.n), GEN = Number(a.gen);

async function run(dir, fold, prompts) {
  if (fold) process.env.MLXB_FOLD_NORMS = '1';
  else delete process.env.MLXB_FOLD_NORMS;
  const model = await loadModel(dir, { device: a.device });
  const engine = createInferenceEngine({ nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize },
    { maxRows: N, blockSize: 16, prefillChunk: 256, batchInvariant: false });
  const one = async (p) => {
    const toks = [], lps = [];
    for await (const e of engine.generate(p, { temperature: 0, maxTokens: GEN, stopTokenIds: [], logprobs: true })) {
      toks.push(e.token);
      lps.push(e.logprob);
    }
    return { toks, lps };
  };
  const t0 = performance.now();
  const res = await Promise.all(prompts.map(one));
  const ms = performance.now() - t0;
  await engine.close();
  await model.dispose?.();
  return { res, ms };
}

let failed = 0;
for (const dir of positionals) {
  const probe = await loadModel(dir, { device: a.device });
  const vocab = probe.config.vocabSize;
  await probe.dispose?.();
  let s = 777;
  const r = (k) => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s >>> 8) % k; };
  const prompts = Array.from({ length: N }, (_, i) => Array.from({ length: 20 + ((i * 37) % 100) }, () => r(vocab)));
  const base = await run(dir, false, prompts);
  const fold = await run(dir, true, prompts);
  let same = 0, maxd = 0;
  const firsts = [];
  for (let i = 0; i < N; ++i) {
    const x = base.res[i], y = fold.res[i];
    let k = 0;
    while (k < x.toks.length && k < y.toks.length && x.toks[k] === y.toks[k]) {
      maxd = Math.max(maxd, Math.abs(x.lps[k] - y.lps[k]));
      ++k;
    }
    if (k === x.toks.length && k === y.toks.length) ++same;
    else firsts.push(k);
  }
  const ok = Number.isFinite(maxd) && maxd < 0.25 && same >= N / 2;
  if (!ok) ++failed;
  console.log(`${dir}: folded == unfolded ${same}/${N} requests (others first differ at steps ${JSON.stringify(firsts.slice(0, 12))}), ` +
    `max |logprob difference| on agreeing steps ${maxd.toFixed(4)}; ${base.ms.toFixed(0)} / ${fold.ms.toFixed(0)} ms ${ok ? 'OK' : 'FAIL'}`);
}
process.exitCode = failed ? 1 : 0;
