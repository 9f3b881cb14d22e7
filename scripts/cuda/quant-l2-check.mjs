// L2 (DESIGN.md) on CUDA: the quantized fixtures (test/fixtures/quant, written by our quantizer:
// llama, qwen3, gemma3_text at 4 and 8 bits and a mixed-precision llama from the hidden-64
// checkpoints of test/fixtures/models, and bfloat16 hidden-256 llama / qwen3 / gemma3_text at
// 4 bits, group 64 / 128, whose shapes the default 4-bit tensor-core GEMVs take: qgemv_tcp for
// one row, qgemv_tcf for 2-8 rows, with bfloat16 activations) run on the GPU through the built
// package, against transformers float32 on the independently dequantized weights
// (scripts/oracle/dequant_oracle.py; logits.f32 and greedy_logits.f32 in each fixture).
// Three of our paths per fixture and activation dtype: the prompt in one prefill (all rows;
// qembedding + the dense path of qmatmul above 8 rows), the prompt in chunks of T - 8, 6 and 2
// rows into one session (all rows; the last two chunks take the GEMV for 2-8 rows) and
// incremental decode (prefill, then the oracle's greedy tokens one at a time: the one-row GEMV).
// Pass, as L1: argmax equal wherever the oracle's top-2 margin > 0.05 and mean
// KL(oracle || ours) <= 1e-3. The oracle is float32, so that is the bar for float32 activations;
// bfloat16 activations must meet the KL bound, and their argmax flips are listed with the
// oracle's margin (bf16 logits of magnitude 8..16 are 0.0625 apart, coarser than the 0.05
// margin) without failing the run. Each line ends with the first 16 hex digits of the SHA-256
// of our logits, so runs under different MLXB_QGEMV_VARIANT values can be told apart.
//
//   node scripts/cuda/quant-l2-check.mjs [float32|bfloat16 ...]   (default: both)
// MLXB_L2_ONLY=name,name runs those fixtures in that order (default: every one of the manifest, in its order).
// MLXB_L2_DEVICE=cpu runs the same comparison on the CPU backend (a check of this script).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { native } from '../../dist/native/index.js';

const ROOT = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'quant');
const MARGIN = 0.05;
const MAX_KL = 1e-3;
// In the manifest's order (as test/cuda-quant.test.ts), or in MLXB_L2_ONLY's.
const all = Object.keys(JSON.parse(readFileSync(join(ROOT, 'manifest.json'), 'utf8')).fixtures);
const only = process.env.MLXB_L2_ONLY ? process.env.MLXB_L2_ONLY.split(',') : null;
if (only && only.some((n) => !all.includes(n))) {
  console.error(`MLXB_L2_ONLY names no fixture of the manifest: ${only.filter((n) => !all.includes(n)).join(', ')}`);
  process.exit(2);
}
const names = only ?? all;
const dtypes = process.argv.length > 2 ? process.argv.slice(2) : ['float32', 'bfloat16'];

function readF32(file) {
  const buf = readFileSync(file);
  return new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
}

function compare(ref, got, vocab, margins) {
  const rows = ref.length / vocab;
  let kl = 0, checked = 0, mismatched = 0, maxAbs = 0;
  const details = [];
  for (let r = 0; r < rows; r++) {
    const a = ref.subarray(r * vocab, (r + 1) * vocab), b = got.subarray(r * vocab, (r + 1) * vocab);
    let ma = -Infinity, mb = -Infinity, ia = 0, ib = 0;
    for (let i = 0; i < vocab; i++) {
      if (a[i] > ma) { ma = a[i]; ia = i; }
      if (b[i] > mb) { mb = b[i]; ib = i; }
      maxAbs = Math.max(maxAbs, Math.abs(a[i] - b[i]));
    }
    let za = 0, zb = 0;
    for (let i = 0; i < vocab; i++) { za += Math.exp(a[i] - ma); zb += Math.exp(b[i] - mb); }
    for (let i = 0; i < vocab; i++) {
      const la = a[i] - ma - Math.log(za), lb = b[i] - mb - Math.log(zb);
      kl += Math.exp(la) * (la - lb);
    }
    if (margins[r] > MARGIN) {
      checked++;
      if (ia !== ib) {
        mismatched++;
        details.push(`row ${r}: oracle top ${ia} margin ${margins[r].toFixed(4)}; ours top ${ib}, ours[${ia}] - ours[${ib}] = ${(b[ia] - b[ib]).toFixed(4)}`);
      }
    }
  }
  return { meanKl: kl / rows, checked, mismatched, maxAbs, details };
}

const device = process.env.MLXB_L2_DEVICE ?? 'cuda';
const nat = native();
if (device === 'cuda' && !nat.buildInfo().cudaAvailable) {
  console.log('skipped: no CUDA device');
  process.exit(0);
}
let failures = 0, cases = 0;
for (const dtype of dtypes) {
  for (const name of names) {
    const dir = join(ROOT, name);
    if (!existsSync(join(dir, 'oracle.json'))) {
      // A fixture added before its oracle run (scripts/oracle/l2-new-device.sh writes the files).
      console.log(`skip ${name.padEnd(16)} ${dtype.padEnd(8)} no oracle outputs yet`);
      continue;
    }
    const o = JSON.parse(readFileSync(join(dir, 'oracle.json'), 'utf8'));
    const V = o.vocab_size;
    const prompt = Int32Array.from(o.prompt_ids);
    const model = await nat.loadModel(dir, { device, dtype });
    try {
      const full = await model.forward(prompt, true);
      const T = prompt.length;
      const chunkSession = model.createSession(T + 1);
      const pieces = [];
      for (const [a, b] of [[0, T - 8], [T - 8, T - 2], [T - 2, T]]) pieces.push(await chunkSession.forward(prompt.subarray(a, b), true));
      chunkSession.dispose();
      const chunked = new Float32Array(T * V);
      let at = 0;
      for (const p of pieces) { chunked.set(p, at); at += p.length; }
      const session = model.createSession(prompt.length + o.greedy_tokens.length + 1);
      const parts = [await session.forward(prompt, false)];
      for (let i = 0; i + 1 < o.greedy_tokens.length; i++) parts.push(await session.forward(Int32Array.of(o.greedy_tokens[i]), false));
      session.dispose();
      const stepped = new Float32Array(parts.length * V);
      parts.forEach((p, i) => stepped.set(p, i * V));
      for (const [path, ref, got, margins] of [
        ['prefill', readF32(join(dir, 'logits.f32')), full, o.prompt_top2_margins],
        ['chunked', readF32(join(dir, 'logits.f32')), chunked, o.prompt_top2_margins],
        ['decode', readF32(join(dir, 'greedy_logits.f32')), stepped, o.greedy_top2_margins],
      ]) {
        const r = compare(ref, got, V, margins);
        const ok = (r.mismatched === 0 || dtype !== 'float32') && r.meanKl <= MAX_KL && got.length === ref.length;
        cases++;
        if (!ok) failures++;
        console.log(`${ok ? 'ok  ' : 'FAIL'} ${name.padEnd(16)} ${dtype.padEnd(8)} ${path.padEnd(7)} rows ${ref.length / V} ` +
          `argmax-checked ${r.checked} mismatched ${r.mismatched} mean KL ${r.meanKl.toExponential(2)} max|dlogit| ${r.maxAbs.toFixed(4)} ` +
          `sha ${createHash('sha256').update(new Uint8Array(got.buffer, got.byteOffset, got.byteLength)).digest('hex').slice(0, 16)}`);
        for (const d of r.details) console.log(`       ${d}`);
      }
    } finally {
      model.dispose();
    }
  }
}
const variant = process.env.MLXB_QGEMV_VARIANT ? ` (MLXB_QGEMV_VARIANT=${process.env.MLXB_QGEMV_VARIANT})` : '';
console.log(failures ? `L2 ${device}${variant} FAILED: ${failures} of ${cases}` : `L2 ${device}${variant} PASSED (${cases} cases)`);
process.exit(failures ? 1 : 0);
