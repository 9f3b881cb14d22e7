// Row helpers for comparing logits with an oracle's.

/** log(softmax(row)) in float64. */
export function logSoftmax(row: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) max = Math.max(max, row[i]!);
  let s = 0;
  for (let i = 0; i < row.length; i++) s += Math.exp(row[i]! - max);
  const l = Math.log(s) + max;
  return Float64Array.from({ length: row.length }, (_, i) => row[i]! - l);
}

/** Index of the largest entry (the first of equals). */
export function argmax(row: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[b]!) b = i;
  return b;
}

/** Largest |a - b| / max|ref| over the rows of [rows, vocab] logits (per-row normalisation). */
export function worstRowError(got: Float32Array, ref: Float32Array, vocab: number): { err: number; row: number } {
  if (got.length !== ref.length) throw new Error(`logits length ${got.length} != reference ${ref.length}`);
  let worst = 0;
  let worstRow = -1;
  for (let r = 0; r < ref.length / vocab; r++) {
    let maxAbs = 0;
    let diff = 0;
    for (let j = 0; j < vocab; j++) {
      const g = got[r * vocab + j]!;
      const o = ref[r * vocab + j]!;
      maxAbs = Math.max(maxAbs, Math.abs(o));
      diff = Math.max(diff, Number.isFinite(g) ? Math.abs(g - o) : Infinity);
    }
    const e = diff / maxAbs;
    if (e > worst || worstRow < 0) {
      worst = e;
      worstRow = r;
    }
  }
  return { err: worst, row: worstRow };
}
