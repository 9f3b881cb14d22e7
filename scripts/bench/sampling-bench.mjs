// generate() tokens/s per sampling mode on one model: greedy, temperature, top-k, top-p and
// penalties, seeded, `--gen` tokens after a short prompt (stop tokens off, so every run has the
// same length). On a device model the sampling runs where the logits are unless the process
// starts with MLXB_DEVICE_SAMPLING=0 (the host Sampler then reads a copied logits row): run it
// both ways to see what device sampling saves. Run after `npm run build` (dist/):
//   node scripts/bench/sampling-bench.mjs --model DIR [--device cuda] [--dtype auto] [--gen 256]
import { parseArgs } from 'node:util';

import { generate } from '../../dist/generation/index.js';
import { loadModel, nativeModel } from '../../dist/models/model.js';
import { native } from '../../dist/native/index.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    device: { type: 'string', default: 'cuda' },
    dtype: { type: 'string', default: 'auto' },
    gen: { type: 'string', default: '256' },
  },
});
if (!values.model) {
  console.error('usage: sampling-bench.mjs --model DIR [--device cuda|cpu] [--dtype auto] [--gen 256]');
  process.exit(2);
}
const gen = Number(values.gen);
const model = await loadModel(values.model, { device: values.device, dtype: values.dtype });
const target = { nativeHandle: nativeModel(model), vocabSize: model.config.vocabSize };
const prompt = [1, 20, 30, 40, 50, 60, 70, 80].map((t) => t % model.config.vocabSize);
const modes = [
  ['greedy', { temperature: 0 }],
  ['temperature 0.8', { temperature: 0.8 }],
  ['top-k 40', { temperature: 0.8, topK: 40 }],
  ['top-p 0.9', { temperature: 1.0, topP: 0.9 }],
  ['top-k 40 top-p 0.9 min-p 0.05', { temperature: 0.8, topK: 40, topP: 0.9, minP: 0.05 }],
  ['top-p 0.9 + penalties', { temperature: 1.0, topP: 0.9, repetitionPenalty: 1.1, presencePenalty: 0.2 }],
];
const where = process.env.MLXB_DEVICE_SAMPLING === '0' || model.device === 'cpu' ? 'host sampling' : 'device sampling';
console.log(`model ${values.model} on ${model.device}, vocab ${model.config.vocabSize}, ${where}`);
await generate(target, prompt, { maxTokens: 16, temperature: 0, stopTokenIds: [] }).complete();  // warm-up
let n = 0;
for (const [label, opts] of modes) {
  const best = [];
  for (let r = 0; r < 2; r++) {
    const t0 = performance.now();
    n = 0;
    for await (const _ of generate(target, prompt, { maxTokens: gen, seed: 7, stopTokenIds: [], ...opts })) n++;
    best.push(n / ((performance.now() - t0) / 1000));
  }
  console.log(`generate ${label}: ${Math.max(...best).toFixed(1)} tok/s (${gen} tokens, ${n} events, best of 2, ${where})`);
}
// Greedy and temperature 0.8 driven one native step per call (what generate() did before it
// asked for several steps per call), for comparison with the rows above.
for (const [label, seqOpts] of [['greedy', { temperature: 0, seed: 7 }], ['temperature 0.8', { temperature: 0.8, seed: 7 }]]) {
  const perCall = [];
  for (let r = 0; r < 2; r++) {
    const seq = new (native().GenerationSequence)(target.nativeHandle, seqOpts, prompt.length + gen + 1);
    const t0 = performance.now();
    let tok = (await seq.prefill(Int32Array.from(prompt))).token;
    for (let i = 1; i < gen; i++) tok = (await seq.step(tok)).token;
    perCall.push(gen / ((performance.now() - t0) / 1000));
    seq.dispose();
  }
  console.log(`one step per call ${label}: ${Math.max(...perCall).toFixed(1)} tok/s (${gen} tokens, best of 2)`);
}
model.dispose();
