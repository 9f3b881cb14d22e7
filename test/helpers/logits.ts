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
