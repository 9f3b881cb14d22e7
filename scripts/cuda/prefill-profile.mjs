// Prompt prefills of one model on CUDA, for a profiler (nsys) or a kernel A/B: `runs` prefills of
// `len` tokens, each on a fresh session (as bench.mjs times them), then the mean time per prefill
// on the host (logits of the last row copied). With DUMP, the last row's logits of the final run
// are written there as float32 (compare two runs, e.g. MLXB_FLASH_MMA=0 and 1, with --compare).
//   node scripts/cuda/prefill-profile.mjs DIR [runs] [len] [DUMP]     (needs MLXB_NATIVE_PATH)
//   node scripts/cuda/prefill-profile.mjs --compare A.bin B.bin
import { readFileSync, writeFileSync } from 'node:fs';

if (process.argv[2] === '--compare') {
  const read = (p) => { const b = readFileSync(p); return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4); };
  const a = read(process.argv[3]), b = read(process.argv[4]);
  const soft = (x) => { let m = -Infinity; for (const v of x) m = Math.max(m, v); let s = 0; for (const v of x) s += Math.exp(v - m); return x.map((v) => Math.exp(v - m) / s); };
  const pa = soft(Float64Array.from(a)), pb = soft(Float64Array.from(b));
  let kl = 0, maxd = 0, am = 0, bm = 0;
  for (let i = 0; i < a.length; i++) {
    if (pa[i] > 0) kl += pa[i] * Math.log(pa[i] / Math.max(pb[i], 1e-300));
    maxd = Math.max(maxd, Math.abs(a[i] - b[i]));
    if (a[i] > a[am]) am = i;
    if (b[i] > b[bm]) bm = i;
  }
  console.log(`compare: KL ${kl.toExponential(3)}, max |diff| ${maxd.toFixed(4)}, argmax ${am} vs ${bm}`);
  process.exit(0);
}

const { loadModel } = await import('../../dist/models/index.js');
const { nativeModel } = await import('../../dist/models/model.js');
const [dir, runsArg = '5', lenArg = '512', dump] = process.argv.slice(2);
const runs = Number(runsArg), len = Number(lenArg);
const model = await loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
const native = nativeModel(model);
const ids = Int32Array.from({ length: len }, (_, i) => 1000 + ((i * 7919 + 13) % 20000));
const once = async () => {
  const s = native.createSession(len + 8);
  const logits = await s.forward(ids, false);
  s.dispose();
  return logits;
};
await once();  // warm-up
const t0 = performance.now();
let logits;
for (let r = 0; r < runs; r++) logits = await once();
const ms = (performance.now() - t0) / runs;
console.log(`prefill ${len}: ${ms.toFixed(2)} ms (${(len / ms * 1000).toFixed(0)} tok/s), mean of ${runs}`);
if (dump) writeFileSync(dump, Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength));
model.dispose();
