/** Validation of token-id inputs shared by scoring, state and generation. */
import { InvalidArgumentError } from '../errors.js';

/** A non-empty Int32Array of ids in [0, vocabSize); numbers must be integers. Always a copy. */
export function toTokenIds(ids: Int32Array | ArrayLike<number>, vocabSize: number, field = 'ids'): Int32Array {
  if (!(ids instanceof Int32Array) && !Array.isArray(ids))
    throw new InvalidArgumentError(`${field} must be an Int32Array or an array of numbers`, field);
  const n = ids.length;
  if (n === 0) throw new InvalidArgumentError(`${field} must hold at least one token id`, field);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const v = ids[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= vocabSize)
      throw new InvalidArgumentError(`${field}[${i}] = ${String(v)} is not a token id in [0, ${vocabSize})`, field);
    out[i] = v;
  }
  return out;
}
