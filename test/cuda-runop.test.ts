// CUDA against the CPU reference through the op runner (runOp), on random inputs over awkward
// shapes: fp32 within normalised MSE 1e-7, bf16 within 2e-5 (1e-4 for attention, whose
// probabilities are rounded to bf16 before P·V). Opt-in (MLXB_TEST_CUDA=1, on a GPU machine);
// without a GPU only the typed-error check runs. The native program test/native/cuda_ops_check.cc
// covers the same ops against float64 references.
import { describe, expect, it } from 'vitest';

import { MlxbError } from '../lib/errors.js';
import { native } from '../lib/native/index.js';
import type { OpName, OpParams, OpTensor } from '../types/native/ops.js';
import { bf16Bits, bf16Value, rng } from './ops-suite.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';
const TARGET = 'cuda' as const;

type Dt = 'float32' | 'bfloat16';

function values(r: () => number, n: number, lo = -1, hi = 1): Float64Array {
  const a = new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * r();
  return a;
}

// The same numbers as a tensor of `dt` (rounded) and as the float32 tensor the CPU reads.
function pair(v: Float64Array, shape: number[], dt: Dt): { dev: OpTensor; cpu: OpTensor } {
  if (dt === 'float32') {
    const t: OpTensor = { data: Float32Array.from(v), shape, dtype: 'float32' };
    return { dev: t, cpu: t };
  }
  const bits = Uint16Array.from(v, (x) => bf16Bits(x));
  return { dev: { data: bits, shape, dtype: 'bfloat16' }, cpu: { data: Float32Array.from(bits, (b) => bf16Value(b)), shape, dtype: 'float32' } };
}

const i32 = (a: number[]): OpTensor => ({ data: Int32Array.from(a), shape: [a.length], dtype: 'int32' });

function asF64(t: OpTensor): Float64Array {
  if (t.dtype === 'bfloat16') return Float64Array.from(t.data as Uint16Array, (b) => bf16Value(b));
  return Float64Array.from(t.data as Float32Array);
}

function nmse(got: Float64Array, want: Float64Array): number {
  let num = 0, den = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(got[i]!)) return Infinity;
    num += (got[i]! - want[i]!) ** 2;
    den += want[i]! ** 2;
  }
  return den === 0 ? num : num / den;
}

interface Case {
  name: string;
  op: OpName;
  build: (dt: Dt, r: () => number) => { dev: Record<string, OpTensor>; cpu: Record<string, OpTensor>; params?: OpParams };
  bf16Tol?: number;
  only?: Dt;  // the op has a CUDA kernel for this dtype only (the generic form takes CPU tensors)
}

function inputs(entries: Record<string, { dev: OpTensor; cpu: OpTensor }>) {
  const dev: Record<string, OpTensor> = {}, cpu: Record<string, OpTensor> = {};
  for (const [k, v] of Object.entries(entries)) { dev[k] = v.dev; cpu[k] = v.cpu; }
  return { dev, cpu };
}

const same = (t: OpTensor) => ({ dev: t, cpu: t });

function attentionCase(name: string, t: number, hq: number, hkv: number, s: number, d: number, extra: OpParams = {}): Case {
  return {
    name, op: 'attention', bf16Tol: 1e-4,
    build: (dt, r) => {
      const qPos = Array.from({ length: t }, (_, i) => s - t + i);
      const kPos = Array.from({ length: s }, (_, i) => (i % 11 === 5 ? -1 : i));
      return {
        ...inputs({ q: pair(values(r, t * hq * d, -2, 2), [t, hq, d], dt), k: pair(values(r, hkv * s * d, -2, 2), [hkv, s, d], dt),
          v: pair(values(r, hkv * s * d), [hkv, s, d], dt), qPos: same(i32(qPos)), kPos: same(i32(kPos)) }),
        params: { scale: 1 / Math.sqrt(d), ...extra },
      };
    },
  };
}

const cases: Case[] = [
  { name: 'matmul gemv M=3 N=257 K=1000', op: 'matmul', build: (dt, r) => inputs({ x: pair(values(r, 3000), [3, 1000], dt), w: pair(values(r, 257000), [257, 1000], dt) }) },
  { name: 'matmul M=1 N=1001 K=77 +bias', op: 'matmul', build: (dt, r) => inputs({ x: pair(values(r, 77), [1, 77], dt), w: pair(values(r, 1001 * 77), [1001, 77], dt), bias: pair(values(r, 1001), [1001], dt) }) },
  { name: 'matmul gemm M=130 N=300 K=515', op: 'matmul', build: (dt, r) => inputs({ x: pair(values(r, 130 * 515), [130, 515], dt), w: pair(values(r, 300 * 515), [300, 515], dt) }) },
  { name: 'rms_norm 5x1001 (1+w)', op: 'rms_norm', build: (dt, r) => ({ ...inputs({ x: pair(values(r, 5005, -3, 3), [5, 1001], dt), w: pair(values(r, 1001), [1001], dt) }), params: { eps: 1e-6, addOne: true } }) },
  { name: 'layer_norm 3x770 +b', op: 'layer_norm', build: (dt, r) => ({ ...inputs({ x: pair(values(r, 2310, -2, 4), [3, 770], dt), w: pair(values(r, 770), [770], dt), b: pair(values(r, 770), [770], dt) }), params: { eps: 1e-5 } }) },
  { name: 'softmax 4x3001', op: 'softmax', build: (dt, r) => inputs({ x: pair(values(r, 12004, -8, 8), [4, 3001], dt) }) },
  { name: 'rope partial interleaved', op: 'rope', build: (dt, r) => ({
    ...inputs({ x: pair(values(r, 7 * 3 * 96), [7, 3, 96], dt), positions: same(i32([0, 1, 5, 9, 100, 4000, 7])),
      invFreq: same({ data: Float32Array.from({ length: 16 }, (_, i) => 10000 ** (-i / 16)), shape: [16], dtype: 'float32' }) }),
    params: { rotDim: 32, interleaved: true, mscale: 1.1 } }) },
  { name: 'gated_act gelu_tanh 3x1001', op: 'gated_act', build: (dt, r) => ({ ...inputs({ gate: pair(values(r, 3003, -5, 5), [3, 1001], dt), up: pair(values(r, 3003), [3, 1001], dt) }), params: { act: 'gelu_tanh' } }) },
  { name: 'add 10007', op: 'add', build: (dt, r) => inputs({ a: pair(values(r, 10007), [10007], dt), b: pair(values(r, 10007), [10007], dt) }) },
  { name: 'softcap 1000', op: 'softcap', build: (dt, r) => ({ ...inputs({ x: pair(values(r, 1000, -40, 40), [1000], dt) }), params: { cap: 30 } }) },
  { name: 'embedding 300x65, 9 ids', op: 'embedding', build: (dt, r) => ({ ...inputs({ table: pair(values(r, 300 * 65), [300, 65], dt), ids: same(i32([0, 299, 5, 5, 17, 100, 3, 250, 1])) }), params: { scale: 2, outDtype: dt } }) },
  { name: 'matmul_accumulate M=40 N=300 K=512', op: 'matmul_accumulate', build: (dt, r) => inputs({ x: pair(values(r, 40 * 512), [40, 512], dt), w: pair(values(r, 300 * 512), [300, 512], dt), resid: pair(values(r, 40 * 300, -4, 4), [40, 300], dt) }) },
  { name: 'rms_scaled_gated_act silu 33 rows F=1032 H=4096', op: 'rms_scaled_gated_act', only: 'bfloat16', build: (dt, r) => ({ ...inputs({ h: pair(values(r, 33 * 2064, -20, 20), [33, 2064], dt), x: pair(values(r, 33 * 4096, -3, 3), [33, 4096], dt) }), params: { eps: 1e-5, act: 'silu' } }) },
  { name: 'rms_scaled_gated_act gelu_tanh 3 rows F=64 H=200', op: 'rms_scaled_gated_act', only: 'bfloat16', build: (dt, r) => ({ ...inputs({ h: pair(values(r, 3 * 128, -5, 5), [3, 128], dt), x: pair(values(r, 600, -1, 1), [3, 200], dt) }), params: { eps: 1e-6, act: 'gelu_tanh' } }) },
  attentionCase('attention prefill causal T=70 GQA 4:1 D=128', 70, 8, 2, 70, 128),
  attentionCase('attention window 17 + softcap D=64', 40, 4, 4, 40, 64, { window: 17, softcap: 20 }),
  attentionCase('attention decode S=333 D=128', 1, 16, 4, 333, 128),
];

describe('cuda ops without a GPU', () => {
  it.skipIf(enabled)('reject with a typed error instead of crashing', async () => {
    const x: OpTensor = { data: new Float32Array(8), shape: [2, 4], dtype: 'float32' };
    const err = await native().runOp('rms_norm', 'cuda', { x, w: { data: new Float32Array(4), shape: [4], dtype: 'float32' } }, { eps: 1e-5 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MlxbError);
    expect((err as MlxbError).code).toBe(native().buildInfo().cudaBuilt ? 'UNSUPPORTED' : 'NOT_BUILT');
  });
});

describe.skipIf(!enabled)('cuda ops match the cpu reference (runOp)', () => {
  for (const dt of ['float32', 'bfloat16'] as const) {
    for (const c of cases.filter((x) => !x.only || x.only === dt)) {
      it(`${c.name} ${dt}`, async () => {
        const r = rng(c.name.length * 7 + (dt === 'float32' ? 1 : 2));
        const { dev, cpu, params } = c.build(dt, r);
        const want = asF64(await native().runOp(c.op, 'cpu', cpu, params ? { ...params, outDtype: 'float32' } : { outDtype: 'float32' }));
        const got = await native().runOp(c.op, TARGET, dev, params);
        expect(got.dtype).toBe(dt);
        const e = nmse(asF64(got), want);
        expect(e).toBeLessThanOrEqual(dt === 'float32' ? 1e-7 : (c.bf16Tol ?? 2e-5));
      });
    }
  }
});
