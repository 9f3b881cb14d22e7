// Op-level microbenchmark of the CPU (or CUDA) kernels on Llama-3.2-1B shapes, through the op
// runner (timeOp). Prints the median time per call and the achieved weight bandwidth (GEMV)
// or GFLOP/s (GEMM). Usage: node scripts/bench/ops-bench.mjs [--device cpu] [--iters 20] [--only name]
import { parseArgs } from 'node:util';

import { native } from '../../dist/native/index.js';

const { values } = parseArgs({
  options: {
    device: { type: 'string', default: 'cpu' },
    iters: { type: 'string', default: '10' },
    only: { type: 'string' },
    tokens: { type: 'string', default: '512' },
  },
});
const device = values.device;
const iters = Number(values.iters);
const T = Number(values.tokens);
const nat = native();

function bf16(n, seed) {
  const a = new Uint16Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = 0x3c00 + ((s >>> 16) & 0xff) + ((s & 0x8000) ? 0x8000 : 0); // ~±0.008..0.016
  }
  return a;
}
function f32(n, seed) {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = (s / 4294967296 - 0.5) * 2;
  }
  return a;
}

const cases = [];
for (const [name, n, k] of [['qkv', 3072, 2048], ['o', 2048, 2048], ['gate_up', 16384, 2048], ['down', 2048, 8192], ['lm_head', 128256, 2048]]) {
  cases.push({ label: `gemv bf16 ${name} [${n}x${k}]`, op: 'matmul', kind: 'gemv', bytes: n * k * 2,
    inputs: () => ({ x: { data: f32(k, 1), shape: [1, k], dtype: 'float32' }, w: { data: bf16(n * k, 2), shape: [n, k], dtype: 'bfloat16' } }) });
  if (name !== 'lm_head')
    cases.push({ label: `gemm bf16 ${name} M=${T} [${n}x${k}]`, op: 'matmul', kind: 'gemm', flops: 2 * T * n * k,
      inputs: () => ({ x: { data: f32(T * k, 1), shape: [T, k], dtype: 'float32' }, w: { data: bf16(n * k, 2), shape: [n, k], dtype: 'bfloat16' } }) });
}
cases.push({ label: `attention prefill T=${T} 32/8 heads d=64`, op: 'attention', kind: 'gemm', flops: 2 * 2 * 32 * 64 * T * T / 2,
  inputs: () => ({ q: { data: f32(T * 32 * 64, 1), shape: [T, 32, 64], dtype: 'float32' }, k: { data: f32(8 * T * 64, 2), shape: [8, T, 64], dtype: 'float32' },
    v: { data: f32(8 * T * 64, 3), shape: [8, T, 64], dtype: 'float32' }, qPos: { data: Int32Array.from({ length: T }, (_, i) => i), shape: [T], dtype: 'int32' },
    kPos: { data: Int32Array.from({ length: T }, (_, i) => i), shape: [T], dtype: 'int32' } }) });
cases.push({ label: `attention decode S=${T} 32/8 heads d=64`, op: 'attention', kind: 'gemv', bytes: 2 * 8 * T * 64 * 4,
  inputs: () => ({ q: { data: f32(32 * 64, 1), shape: [1, 32, 64], dtype: 'float32' }, k: { data: f32(8 * T * 64, 2), shape: [8, T, 64], dtype: 'float32' },
    v: { data: f32(8 * T * 64, 3), shape: [8, T, 64], dtype: 'float32' }, qPos: { data: Int32Array.from([T - 1]), shape: [1], dtype: 'int32' },
    kPos: { data: Int32Array.from({ length: T }, (_, i) => i), shape: [T], dtype: 'int32' } }) });
cases.push({ label: `gated_act silu [${T}x8192]`, op: 'gated_act', kind: 'elem', elems: T * 8192,
  inputs: () => ({ gate: { data: f32(T * 8192, 1), shape: [T, 8192], dtype: 'float32' }, up: { data: f32(T * 8192, 2), shape: [T, 8192], dtype: 'float32' } }) });

console.log(`device ${device}, SIMD ${JSON.stringify(nat.cpuFeatures().level)}, threads ${nat.buildInfo().threads}`);
for (const c of cases) {
  if (values.only && !c.label.includes(values.only)) continue;
  const t = await nat.timeOp(c.op, device, c.inputs(), {}, c.kind === 'gemm' ? Math.max(2, Math.floor(iters / 4)) : iters);
  const s = t.msMedian / 1000;
  const fig = c.kind === 'gemv' ? `${(c.bytes / s / 1e9).toFixed(1)} GB/s` : c.kind === 'gemm' ? `${(c.flops / s / 1e9).toFixed(1)} GFLOP/s` : `${(c.elems / s / 1e9).toFixed(2)} Gelem/s`;
  const threads = nat.buildInfo().threads;
  const cs = t.cpuMsMedian / 1000 / threads; // as if every thread had a core to itself
  const cfig = c.kind === 'gemv' ? `${(c.bytes / cs / 1e9).toFixed(1)} GB/s` : c.kind === 'gemm' ? `${(c.flops / cs / 1e9).toFixed(1)} GFLOP/s` : `${(c.elems / cs / 1e9).toFixed(2)} Gelem/s`;
  console.log(`${c.label.padEnd(44)} ${t.msMedian.toFixed(3).padStart(9)} ms (min ${t.msMin.toFixed(3)})  ${fig.padStart(14)}  | by CPU time: ${cfig}`);
}
