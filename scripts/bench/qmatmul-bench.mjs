// Quantized matmul on Llama-3.2-1B shapes (hidden 2048, MLP 8192, vocab 128256 tied head):
// median time per call of each projection at M rows, the weight bandwidth it reached, and the
// decode rate the matmuls alone allow (16 layers + the head; attention and norms excluded).
// Usage: node scripts/bench/qmatmul-bench.mjs [--bits 4] [--group-size 64] [--m 1] [--iters 20]
import { parseArgs } from 'node:util';

import { native } from '../../dist/native/index.js';

const { values } = parseArgs({
  options: {
    bits: { type: 'string', default: '4' }, 'group-size': { type: 'string', default: '64' },
    m: { type: 'string', default: '1' }, iters: { type: 'string', default: '20' },
  },
});
const bits = Number(values.bits);
const groupSize = Number(values['group-size']);
const M = Number(values.m);
const iters = Number(values.iters);
const nat = native();

let s = 12345;
const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296 - 0.5);
const shapes = [
  ['q_proj', 2048, 2048, 16], ['k_proj', 512, 2048, 16], ['v_proj', 512, 2048, 16], ['o_proj', 2048, 2048, 16],
  ['gate_proj', 8192, 2048, 16], ['up_proj', 8192, 2048, 16], ['down_proj', 2048, 8192, 16], ['lm_head', 128256, 2048, 1],
];
let perToken = 0;
let bytesPerToken = 0;
for (const [name, N, K, count] of shapes) {
  // Random packed words / scales are as good as a real quantization for timing.
  const packed = new Uint32Array((N * K * bits) / 32);
  for (let i = 0; i < packed.length; i++) packed[i] = (rnd() * 4294967296) >>> 0;
  const groups = (N * K) / groupSize;
  const scales = new Uint16Array(groups).fill(0x3c00);
  const biases = new Uint16Array(groups).fill(0xbc00);
  const weight = { packed, scales, biases, scaleDtype: 'bfloat16', rows: N, cols: K, bits, groupSize };
  const x = Float32Array.from({ length: M * K }, rnd);
  nat.qmatmulAffine({ x, m: M, weight });
  const times = [];
  for (let i = 0; i < iters; i++) {
    const t0 = process.hrtime.bigint();
    nat.qmatmulAffine({ x, m: M, weight });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const ms = times[Math.floor(times.length / 2)];
  const bytes = packed.byteLength + scales.byteLength * 2;
  perToken += ms * count;
  bytesPerToken += bytes * count;
  console.log(`${name.padEnd(10)} [${N}x${K}] M=${M}: ${ms.toFixed(3)} ms  ${(bytes / ms / 1e6).toFixed(1)} GB/s`);
}
console.log(`matmuls per ${M === 1 ? 'token' : `${M} rows`}: ${perToken.toFixed(1)} ms -> ${((1000 * M) / perToken).toFixed(1)} tok/s ` +
  `(${(bytesPerToken / 1e9).toFixed(2)} GB of weights; bound at 65 GB/s: ${(65e9 / bytesPerToken).toFixed(0)} tok/s)`);
