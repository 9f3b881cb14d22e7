// Per-token overhead of the generation loop between C++ and the JS iterator: generate() on the
// native bigram table model (a forward is a 1 KB row copy), so the time per token is almost all
// loop overhead (worker-thread hop, promise, event object). Run after `npm run build`:
//   node scripts/bench/generation_overhead.mjs [tokens]
import { generate } from '../../dist/generation/index.js';
import { tableTarget } from './table_target.mjs';

const n = Number(process.argv[2] ?? 2000);
const target = tableTarget();
await generate(target, [1], { maxTokens: 50, temperature: 0 }).complete();  // warm-up
for (const [label, opts] of [['greedy', { temperature: 0 }], ['sampled (T=0.8, top-k 40)', { temperature: 0.8, topK: 40, seed: 1 }]]) {
  const t0 = performance.now();
  let events = 0;
  for await (const _ of generate(target, [1], { maxTokens: n, ...opts })) events++;
  const ms = performance.now() - t0;
  console.log(`${label}: ${events} tokens in ${ms.toFixed(1)} ms = ${((ms / events) * 1000).toFixed(1)} us/token`);
}
