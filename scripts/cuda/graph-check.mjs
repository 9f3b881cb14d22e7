// Decode graphs against the eager path on every model fixture, on the GPU: greedy tokens from a
// prompt (graph replays, re-recorded as the caches grow past their capacity) must equal the eager
// path's token for token, and the stepped logits of a session must agree closely (the two paths
// split decode attention differently, so bitwise equality is not expected). The eager reference
// runs the unfused layers (MLXB_CUDA_FUSED=0); a third run, eager with the fused decode layers
// (models/decode_fused.h), must equal it exactly: same tokens, identical logits.
//   node scripts/cuda/graph-check.mjs [n]     (needs MLXB_NATIVE_PATH, as l1-check.mjs)
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';
import { greedyTokens } from '../../dist/scoring/index.js';

const n = Number(process.argv[2] ?? 300);
const fixtures = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'models');
const names = readdirSync(fixtures).filter((f) => statSync(join(fixtures, f)).isDirectory()).sort();

async function run(name, graphs, fused) {
  process.env.MLXB_CUDA_GRAPH = graphs ? '1' : '0';  // read when the model loads
  process.env.MLXB_CUDA_FUSED = fused ? '1' : '0';
  const model = await loadModel(join(fixtures, name), { device: 'cuda', dtype: 'bfloat16' });
  const vocab = model.config.vocabSize;
  const prompt = Int32Array.from({ length: 37 }, (_, i) => (i * 7919 + 13) % vocab);
  const t0 = performance.now();
  const tokens = await greedyTokens(model, prompt, n);
  const ms = performance.now() - t0;
  const session = nativeModel(model).createSession(prompt.length + 40);
  await session.forward(prompt, false);
  const steps = [];
  for (let i = 0; i < 32; i++) steps.push(await session.forward(Int32Array.of(tokens[i]), false));
  session.dispose();
  model.dispose();
  return { tokens, steps, ms };
}

let failures = 0;
for (const name of names) {
  const eager = await run(name, false, false);
  const graph = await run(name, true, true);
  const fused = await run(name, false, true);
  const compare = (a, b) => {
    let first = -1;
    for (let i = 0; i < n; i++) if (a.tokens[i] !== b.tokens[i]) { first = i; break; }
    let maxAbs = 0;
    for (let s = 0; s < a.steps.length; s++)
      for (let i = 0; i < a.steps[s].length; i++) maxAbs = Math.max(maxAbs, Math.abs(a.steps[s][i] - b.steps[s][i]));
    return { first, maxAbs };
  };
  const { first, maxAbs } = compare(eager, graph);
  const exact = compare(eager, fused);
  const ok = first < 0 && maxAbs < 0.05 && exact.first < 0 && exact.maxAbs === 0;
  if (!ok) failures++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name.padEnd(14)} greedy ${n} tokens ${first < 0 ? 'equal' : `differ from ${first}`}; ` +
    `32 stepped rows max|dlogit| ${maxAbs.toFixed(4)}; fused eager ${exact.first < 0 && exact.maxAbs === 0 ? 'identical' : `differs (token ${exact.first}, max|dlogit| ${exact.maxAbs})`}; ` +
    `${(n / eager.ms * 1e3).toFixed(0)} -> ${(n / graph.ms * 1e3).toFixed(0)} tok/s`);
}
console.log(failures ? `GRAPH CHECK FAILED: ${failures}` : `GRAPH CHECK PASSED (${names.length} fixtures)`);
process.exit(failures ? 1 : 0);
