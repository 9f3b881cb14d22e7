#!/usr/bin/env node
// Quantized CPU kernels on whatever CPU this runs on (the GPU machine's host has AVX-512, this
// development VM does not): qmatmul for every bits x group size x row count against float64
// matmul on the addon's bit-exact dequantization. Float paths must agree to 2e-6 of the
// magnitude; the integer 4/8-bit path (int16 activations) to 1e-4. Plain node, no test runner.
// Usage: node scripts/oracle/quant_cpu_check.mjs path/to/mlxb.node
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const b = require(process.argv[2]);
const flags = (readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m) ?? ['', ''])[1];
const avx512 = / avx512f /.test(`${flags} `) && / avx512bw /.test(`${flags} `);
let seed = 1;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) - 0.5;
let failures = 0;
let checks = 0;
for (const bits of [2, 3, 4, 5, 6, 8]) {
  for (const groupSize of [32, 64, 128]) {
    const N = 37, K = 384;
    const w = Float32Array.from({ length: N * K }, () => rnd() * 0.1);
    const scaleDtype = groupSize === 64 ? 'bfloat16' : 'float32';
    const q = await b.quantizeAffine({ data: w, dtype: 'float32', rows: N, cols: K }, bits, groupSize, scaleDtype);
    const weight = { ...q, scaleDtype, rows: N, cols: K, bits, groupSize };
    const wd = b.dequantizeAffine(weight);
    const tol = process.env.MLXB_CPU !== 'scalar' && (bits === 4 || bits === 8) ? 1e-4 : 2e-6;
    for (const M of [1, 2, 3, 4, 7, 8, 9, 17]) {
      const x = Float32Array.from({ length: M * K }, () => rnd() * 2);
      const y = b.qmatmulAffine({ x, m: M, weight });
      for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) {
        let ref = 0, mag = 0;
        for (let k = 0; k < K; k++) { ref += x[m * K + k] * wd[n * K + k]; mag += Math.abs(x[m * K + k] * wd[n * K + k]); }
        checks++;
        if (Math.abs(y[m * N + n] - ref) > tol * mag + 1e-6) {
          if (failures++ < 10) console.log(`FAIL bits=${bits} g=${groupSize} M=${M} m=${m} n=${n}: ${y[m * N + n]} vs ${ref}`);
        }
      }
    }
  }
}
console.log(JSON.stringify({ cpu_avx512: avx512, mlxb_cpu: process.env.MLXB_CPU ?? 'auto', checks, failures }));
process.exit(failures ? 1 : 0);
