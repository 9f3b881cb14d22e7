// The generation target the overhead benches run on: the native bigram table model over a vocab of
// V tokens with fixed pseudo-random logits (a 32-bit LCG), so a forward is one row copy and what
// is timed is the loop around it. Needs `npm run build`.
import { native } from '../../dist/native/index.js';

export function tableTarget(V = 256) {
  const table = new Float32Array(V * V);
  let s = 1;
  for (let i = 0; i < table.length; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; table[i] = (s / 2 ** 32) * 4; }
  return { nativeHandle: native().createTableModel(table, V), vocabSize: V };
}
