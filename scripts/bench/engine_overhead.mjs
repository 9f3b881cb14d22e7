// Host time per step of the engine (scheduler, runner bookkeeping, host sampling, event delivery,
// the JS iterators): createInferenceEngine on the native bigram table model, whose forward is a
// row copy, with every stream greedy. Run after `npm run build`:
//   node scripts/bench/engine_overhead.mjs [tokens per stream] [streams]
import { createInferenceEngine } from '../../dist/execution/index.js';
import { tableTarget } from './table_target.mjs';

const n = Number(process.argv[2] ?? 400);
const streams = Number(process.argv[3] ?? 32);
if (!(Number.isInteger(n) && n >= 1 && Number.isInteger(streams) && streams >= 1 && streams <= 1024)) {
  console.error('usage: node scripts/bench/engine_overhead.mjs [tokens >= 1] [streams 1..1024]');
  process.exit(1);
}
const target = tableTarget();
const engine = createInferenceEngine(target, { maxRows: streams, blockSize: 16, maxContext: n + 16 });
try {
  for (let round = 0; round < 3; round++) {  // the first round includes warm-up
    const t0 = performance.now();
    const steps0 = engine.stats().steps;
    const done = await Promise.all(Array.from({ length: streams }, (_, i) =>
      engine.generate([1 + (i % (target.vocabSize - 1))], { maxTokens: n, temperature: 0 }).complete()));
    const ms = performance.now() - t0;
    const steps = engine.stats().steps - steps0;
    const tokens = done.reduce((a, r) => a + r.tokens.length, 0);
    // Streams start as JS submits them, so rows per step vary from round to round: us/token is
    // the steadier figure.
    console.log(`${streams} streams x ${n} tokens: ${steps} steps (${(tokens / steps).toFixed(1)} rows/step) in ${ms.toFixed(1)} ms = ` +
      `${((ms * 1000) / steps).toFixed(1)} us/step, ${((ms * 1000) / tokens).toFixed(2)} us/token`);
  }
} finally {
  await engine.close();
}
