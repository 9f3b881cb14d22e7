// L1 check (DESIGN.md): our CUDA bf16 logits against transformers bf16 on the GPU for every model
// fixture, through the built package (dist/). Two of our paths per fixture: the whole sequence in
// one prefill (forwardSequence) and prefill of the prompt followed by one-token decode steps on a
// session (the decode kernels), each against the oracle run the same way. Pass: argmax equal wherever the oracle's top-2 margin > 0.05 and
// mean KL(oracle || ours) <= 1e-3.
//
//   node scripts/cuda/l1-check.mjs ORACLE_DIR     (after python3 scripts/cuda/l1_oracle.py ...)
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { loadModel } from '../../dist/models/index.js';
import { nativeModel } from '../../dist/models/model.js';
import { forwardSequence } from '../../dist/scoring/index.js';

const oracleDir = process.argv[2];
const fixtures = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'models');
const MARGIN = 0.05;
const MAX_KL = 1e-3;

function compare(ref, got, vocab) {
  const rows = ref.length / vocab;
  let kl = 0;
  let checked = 0;
  let mismatched = 0;
  let maxAbs = 0;
  const details = [];
  for (let r = 0; r < rows; r++) {
    const a = ref.subarray(r * vocab, (r + 1) * vocab);
    const b = got.subarray(r * vocab, (r + 1) * vocab);
    let ma = -Infinity, mb = -Infinity, ia = 0, ib = 0, second = -Infinity;
    for (let i = 0; i < vocab; i++) {
      if (a[i] > ma) { second = ma; ma = a[i]; ia = i; } else if (a[i] > second) second = a[i];
      if (b[i] > mb) { mb = b[i]; ib = i; }
      maxAbs = Math.max(maxAbs, Math.abs(a[i] - b[i]));
    }
    let za = 0, zb = 0;
    for (let i = 0; i < vocab; i++) { za += Math.exp(a[i] - ma); zb += Math.exp(b[i] - mb); }
    let k = 0;
    for (let i = 0; i < vocab; i++) {
      const la = a[i] - ma - Math.log(za), lb = b[i] - mb - Math.log(zb);
      k += Math.exp(la) * (la - lb);
    }
    kl += k;
    if (ma - second > MARGIN) {
      checked++;
      if (ia !== ib) {
        mismatched++;
        details.push(`row ${r}: oracle top ${ia} margin ${(ma - second).toFixed(3)}; ours top ${ib}, ours[${ia}] - ours[${ib}] = ${(b[ia] - b[ib]).toFixed(3)}`);
      }
    }
  }
  return { meanKl: kl / rows, checked, mismatched, maxAbs, details };
}

let failures = 0;
const names = readdirSync(oracleDir).filter((f) => f.endsWith('.json') && !f.includes('.step')).map((f) => f.slice(0, -5)).sort();
for (const name of names) {
  const meta = JSON.parse(readFileSync(join(oracleDir, `${name}.json`), 'utf8'));
  const read = (file) => {
    const buf = readFileSync(join(oracleDir, file));
    return new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  };
  const ref = read(`${name}.f32`);
  const refStep = read(`${name}.step.f32`);
  const vocab = meta.shape[1];
  const model = await loadModel(join(fixtures, name), { device: 'cuda', dtype: 'bfloat16' });
  const ids = Int32Array.from(meta.ids);
  const full = await forwardSequence(model, ids);
  // Prompt in one prefill, then one token per step.
  const session = nativeModel(model).createSession(ids.length + 8);
  const parts = [await session.forward(ids.subarray(0, meta.prompt_len), true)];
  for (let i = meta.prompt_len; i < ids.length; i++) parts.push(await session.forward(ids.subarray(i, i + 1), false));
  session.dispose();
  const stepped = new Float32Array(full.length);
  let off = 0;
  for (const p of parts) { stepped.set(p, off); off += p.length; }
  for (const [path, want, got] of [['prefill', ref, full], ['decode', refStep, stepped]]) {
    const r = compare(want, got, vocab);
    const ok = r.mismatched === 0 && r.meanKl <= MAX_KL;
    if (!ok) failures++;
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${name.padEnd(14)} ${path.padEnd(7)} rows ${ids.length} argmax-checked ${r.checked} mismatched ${r.mismatched} ` +
      `mean KL ${r.meanKl.toExponential(2)} max|dlogit| ${r.maxAbs.toFixed(3)}`);
    for (const d of r.details) console.log(`       ${d}`);
  }
  model.dispose();
}
console.log(failures ? `L1 FAILED: ${failures}` : `L1 PASSED (${names.length} fixtures x 2 paths)`);
process.exit(failures ? 1 : 0);
