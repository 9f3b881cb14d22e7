// Model benchmark through the package's public API only: loadModel (./models) and greedyTokens
// (./scoring). Prints prefill and decode tokens/s, the fraction of the decode bound (weight bytes
// read per token over memory bandwidth) and of the llama.cpp anchor for the same shape
// (../shared/ANCHORS*.md). Medians over --runs; the first run after a warm-up counts.
//
// npm run bench -- --model DIR [--device cpu|cuda] [--dtype auto|float32|bfloat16] [--prompt 512]
//                  [--gen 128] [--runs 3] [--bandwidth GB/s]
//
// Timing: t1 = greedyTokens(prompt, 1) is the prefill (plus one argmax). Decode on the CPU: a
// Session (./state) takes the prompt untimed, then `gen` one-token forwards are timed on their
// own (greedy: the argmax of each row's logits is the next token; the argmax in JS is ~0.1 ms
// against tens of ms per step). On CUDA, where a step is ~1 ms and copying a row of logits would
// distort it: t2 = greedyTokens(prompt, gen + 1) (device argmax, recorded decode steps) adds
// `gen` steps to t1, so decode = gen / (t2 - t1).
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';

import { loadModel } from '@mlx-bun/inference/models';
import { greedyTokens } from '@mlx-bun/inference/scoring';
import { Session } from '@mlx-bun/inference/state';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    device: { type: 'string', default: 'cpu' },
    dtype: { type: 'string', default: 'auto' },
    prompt: { type: 'string', default: '512' },
    gen: { type: 'string', default: '128' },
    runs: { type: 'string', default: '3' },
    bandwidth: { type: 'string' },
  },
});
if (!values.model) {
  console.error('usage: npm run bench -- --model DIR [--device cpu|cuda] [--dtype auto|float32|bfloat16] [--prompt 512] [--gen 128] [--runs 3] [--bandwidth GB/s]');
  process.exit(2);
}
const device = values.device;
const promptLen = Number(values.prompt);
const gen = Number(values.gen);
const runs = Math.max(1, Number(values.runs));
const bandwidth = Number(values.bandwidth ?? (device === 'cuda' ? 4300 : 65)) * 1e9;

// llama.cpp on the same shapes (ANCHORS-CPU.md: 2-core CPU, weights in RAM; ANCHORS.md: H200);
// quantized checkpoints are compared with its Q4_0 figures.
const ANCHORS = {
  cpu: {
    '2048x16': { label: '1B bf16', prefill: 197, decode: 18.0 },
    '256x4': { label: 'tiny bf16', prefill: 21000, decode: 345 },
    '2048x16 q': { label: '1B Q4_0', prefill: 191, decode: 37.5 },
    '256x4 q': { label: 'tiny Q4_0', prefill: 23000, decode: 425 },
  },
  cuda: {
    '4096x32': { label: '8B bf16', prefill: 26544, decode: 209 },
    '2048x16': { label: '1B bf16', prefill: 85152, decode: 794 },
    '4096x32 q': { label: '8B Q4_0', prefill: 10545, decode: 333 },
    '2048x16 q': { label: '1B Q4_0', decode: 975 },
  },
};

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const t0 = performance.now();
const model = await loadModel(values.model, { device, dtype: values.dtype });
const loadS = (performance.now() - t0) / 1000;
const c = model.config;
// Decode reads every weight once per token, except the embedding table when it is not tied to
// the output head (only one row of it is gathered).
const embedBytes = c.tieWordEmbeddings ? 0 : (model.weightBytes * c.vocabSize * c.hiddenSize) / paramsOf(c);
const bytesPerToken = model.weightBytes - embedBytes;
const bound = bandwidth / bytesPerToken;

function paramsOf(cfg) {
  const h = cfg.hiddenSize, L = cfg.numLayers, d = cfg.headDim;
  const attn = h * cfg.numHeads * d * 2 + h * cfg.numKvHeads * d * 2;
  const mlp = 3 * h * cfg.intermediateSize;
  return cfg.vocabSize * h * (cfg.tieWordEmbeddings ? 1 : 2) + L * (attn + mlp + 2 * h) + h;
}

let seed = 12345;
const ids = Array.from({ length: promptLen }, () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return 1000 + (seed % Math.max(1, c.vocabSize - 2000));
});

console.log(`model ${values.model}: ${c.modelType} hidden ${c.hiddenSize} x ${c.numLayers} layers, ${(model.weightBytes / 1e9).toFixed(2)} GB on ${model.device} (loaded in ${loadS.toFixed(1)} s)`);
await greedyTokens(model, ids.slice(0, 16), 2); // warm-up: thread pool, page faults
const prefill = [];
const decode = [];
const shares = [];
// Share of the machine's cores this process got while timed (CPU time / wall time / cores): on a
// busy machine the figures above scale roughly with it.
const cores = availableParallelism();
for (let r = 0; r < runs; r++) {
  const c0 = process.cpuUsage();
  const t = performance.now();
  await greedyTokens(model, ids, 1);
  const t1 = (performance.now() - t) / 1000;
  const tDecode = device === 'cuda' ? await cudaDecode(t1) : await sessionDecode();
  const c = process.cpuUsage(c0);
  const share = (c.user + c.system) / 1e6 / (t1 + tDecode.wall) / cores;
  const dec = gen / Math.max(1e-9, tDecode.steps);
  prefill.push(promptLen / t1);
  decode.push(dec);
  shares.push(share);
  console.log(`  run ${r + 1}: prefill ${(promptLen / t1).toFixed(1)} tok/s, decode ${dec.toFixed(2)} tok/s, ` +
    `CPU share ${(100 * share).toFixed(0)}% of ${cores} cores`);
}
// Seconds spent in the `gen` decode steps (steps) and in the whole decode measurement (wall).
async function cudaDecode(t1) {
  const t = performance.now();
  await greedyTokens(model, ids, gen + 1);
  const t2 = (performance.now() - t) / 1000;
  return { steps: t2 - t1, wall: t2 };
}
async function sessionDecode() {
  const w = performance.now();
  const s = new Session(model, { maxTokens: promptLen + gen + 1 });
  try {
    let row = await s.forward(ids);
    let steps = 0;
    for (let i = 0; i < gen; i++) {
      let best = 0;
      for (let v = 1; v < row.length; v++) if (row[v] > row[best]) best = v;
      const t = performance.now();
      row = await s.forward([best]);
      steps += performance.now() - t;
    }
    return { steps: steps / 1000, wall: (performance.now() - w) / 1000 };
  } finally {
    s.dispose();
  }
}

const p = median(prefill);
const d = median(decode);
const anchor = ANCHORS[device]?.[`${c.hiddenSize}x${c.numLayers}${c.quantized ? ' q' : ''}`];
console.log(`prefill ${promptLen}: ${p.toFixed(1)} tok/s (median of ${runs})` + (anchor?.prefill ? `, ${(p / anchor.prefill).toFixed(2)} x llama.cpp ${anchor.label} (${anchor.prefill})` : ''));
console.log(`decode ${gen}: ${d.toFixed(2)} tok/s (median of ${runs}), ${(100 * d / bound).toFixed(0)}% of the bound ${bound.toFixed(1)} tok/s ` +
  `(${(bytesPerToken / 1e9).toFixed(2)} GB/token at ${(bandwidth / 1e9).toFixed(0)} GB/s)` +
  (anchor ? `, ${(d / anchor.decode).toFixed(2)} x llama.cpp ${anchor.label} (${anchor.decode})` : ''));
console.log(`CPU share while timed: ${(100 * median(shares)).toFixed(0)}% of ${cores} cores (median; below ~90% the machine was busy)`);
model.dispose();
