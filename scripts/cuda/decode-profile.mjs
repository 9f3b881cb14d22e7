// Decode steps of one model on CUDA for a profiler (ncu --graph-profiling node): a 500-token
// prompt (decode attention over a realistic cache), then `steps` one-token steps (the first records the decode graph, the rest replay it),
// then `timed` more steps timed on the host (ms per step, graph replays including the logits copy).
//   node scripts/cuda/decode-profile.mjs DIR [steps] [timed]     (needs MLXB_NATIVE_PATH)
import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';

const [dir, steps = '3', timed = '0'] = process.argv.slice(2);
const model = await loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
const session = nativeModel(model).createSession(500 + Number(steps) + Number(timed) + 8);
await session.forward(Int32Array.from({ length: 500 }, (_, i) => (i * 7919 + 13) % 1000), false);
for (let i = 0; i < Number(steps); i++) await session.forward(Int32Array.of(5 + i), false);
if (Number(timed) > 0) {
  const t0 = performance.now();
  for (let i = 0; i < Number(timed); i++) await session.forward(Int32Array.of(7 + i), false);
  console.log(`${((performance.now() - t0) / Number(timed)).toFixed(3)} ms per step (${timed} steps, logits copied)`);
}
session.dispose();
model.dispose();
