// Folded norms (MLXB_FOLD_NORMS=1, cpp/models/fold_norms.h) against the unfolded model: one process
// loads each checkpoint twice (the variable is read at load), runs the same N concurrent greedy
// engine requests with logprobs through both and prints how many requests agree token for token,
// where the others first differ, and the largest difference of the chosen token's logprob over
// the steps where both still agree; then the same for the unfolded model run at N / 4 rows per
// step (the bf16 noise floor of a legitimate reordering). It fails when the fold's mean logprob
// difference exceeds the larger of twice the floor's and 0.02, or any exceeds 0.25. Prompts are
// fixed pseudo-random ids.
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

async function run(dir, fold, prompts, maxRows = N) {
  if (fold) process.env.MLXB_FOLD_NORMS = '1';
  else delete process.env.MLXB_FOLD_NORMS;
  const model = await loadModel(dir, { device: a.device });
  const engine = createInferenceEngine({ nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize },
    { maxRows, blockSize: 16, prefillChunk: 256, batchInvariant: false });
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
  // The noise floor: the unfolded model again with at most N / 4 rows per step, so other GEMM
  // shapes (and kernels) round the same products differently.
  const fewer = Math.max(1, N >> 2);
  const other = await run(dir, false, prompts, fewer);
  const f = compare(base.res, fold.res), o = compare(base.res, other.res);
  // Random weights give flat logits, so greedy tokens part after a few steps under any change of
  // rounding (the floor below shows it); what must hold is that the fold's logprob error per
  // step stays at bf16 rounding size: a mean within the larger of twice the floor's and 0.02.
  const bound = Math.max(2 * o.mean, 0.02);
  const ok = Number.isFinite(f.maxd) && f.maxd < 0.25 && f.mean <= bound;
  if (!ok) ++failed;
  console.log(`${dir}: folded == unfolded ${f.same}/${N} requests (others first differ at steps ${JSON.stringify(f.firsts.slice(0, 12))}), ` +
    `max |logprob difference| on agreeing steps ${f.maxd.toFixed(4)} (mean ${f.mean.toFixed(5)}, bound ${bound.toFixed(5)}); ${base.ms.toFixed(0)} / ${fold.ms.toFixed(0)} ms ${ok ? 'OK' : 'FAIL'}`);
  console.log(`${dir}: noise floor, unfolded at ${fewer} rows per step == at ${N}: ${o.same}/${N} (first differ at ${JSON.stringify(o.firsts.slice(0, 12))}), ` +
    `max |logprob difference| ${o.maxd.toFixed(4)} (mean ${o.mean.toFixed(5)})`);
}

function compare(xs, ys) {
  let same = 0, maxd = 0, sum = 0, n = 0;
  const firsts = [];
  for (let i = 0; i < xs.length; ++i) {
    const x = xs[i], y = ys[i];
    let k = 0;
    while (k < x.toks.length && k < y.toks.length && x.toks[k] === y.toks[k]) {
      const d = Math.abs(x.lps[k] - y.lps[k]);
      maxd = Math.max(maxd, d);
      sum += d;
      ++n;
      ++k;
    }
    if (k === x.toks.length && k === y.toks.length) ++same;
    else firsts.push(k);
  }
  return { same, maxd, mean: n ? sum / n : 0, firsts };
}
process.exitCode = failed ? 1 : 0;
