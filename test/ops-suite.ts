// Shared op tests: every CPU op against an independent plain-JS reference (double precision)
// over awkward shapes. Imported by test/ops*.test.ts, each of which pins one SIMD level through
// MLXB_CPU before the addon is loaded, so every kernel family is checked against the same
// references.
import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';
import { InvalidArgumentError } from '../lib/errors.js';
import type { OpParams, OpTensor } from '../types/native/ops.js';
import { bf16ToF32 as bf16Value, f16ToF32 as f16Value, f32ToBf16 as bf16Bits } from './helpers/quant_ref.js';

// ---------- deterministic data
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randn(r: () => number, n: number, std = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = Math.max(r(), 1e-12);
    a[i] = std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r());
  }
  return a;
}

// ---------- dtype conversions, written from the IEEE definitions (shared with the quant reference)
export { f32ToBf16 as bf16Bits, bf16ToF32 as bf16Value, f16ToF32 as f16Value } from './helpers/quant_ref.js';

/** Nearest float16 (ties to even) by searching the ordered bit patterns. */
export function f16Bits(x: number): number {
  if (Number.isNaN(x)) return 0x7e00;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(Math.fround(x));
  if (a >= 65520) return sign | 0x7c00;
  let lo = 0;
  let hi = 0x7bff;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (f16Value(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  let best = lo;
  if (lo < 0x7bff) {
    const dl = a - f16Value(lo);
    const dh = f16Value(lo + 1) - a;
    if (dh < dl || (dh === dl && (lo & 1) === 1)) best = lo + 1;
  } else if (a - f16Value(lo) >= (f16Value(lo) - f16Value(lo - 1)) / 2 && a > f16Value(lo)) {
    best = 0x7c00;
  }
  return sign | best;
}

type Fl = 'float32' | 'bfloat16' | 'float16';
/** A tensor of `dtype` holding the values of `v` rounded to it, plus the rounded values. */
function tensorOf(v: Float32Array, shape: number[], dtype: Fl): { t: OpTensor; vals: Float64Array } {
  const vals = new Float64Array(v.length);
  if (dtype === 'float32') {
    for (let i = 0; i < v.length; i++) vals[i] = v[i]!;
    return { t: { data: v, shape, dtype }, vals };
  }
  const bits = new Uint16Array(v.length);
  for (let i = 0; i < v.length; i++) {
    bits[i] = dtype === 'bfloat16' ? bf16Bits(v[i]!) : f16Bits(v[i]!);
    vals[i] = dtype === 'bfloat16' ? bf16Value(bits[i]!) : f16Value(bits[i]!);
  }
  return { t: { data: bits, shape, dtype }, vals };
}
function f32(v: Float32Array, shape: number[]): OpTensor {
  return { data: v, shape, dtype: 'float32' };
}
function i32(v: number[], shape = [v.length]): OpTensor {
  return { data: Int32Array.from(v), shape, dtype: 'int32' };
}

async function run(name: Parameters<ReturnType<typeof native>['runOp']>[0], inputs: Record<string, OpTensor>, params?: OpParams): Promise<Float32Array> {
  const r = await native().runOp(name, 'cpu', inputs, params);
  expect(r.dtype).toBe('float32');
  return r.data as Float32Array;
}

/** |got - want| <= atol + rtol * scale[i] everywhere (scale defaults to |want|). */
function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, atol: number, rtol: number, scale?: ArrayLike<number>): void {
  expect(got.length).toBe(want.length);
  let worst = -1;
  let worstI = -1;
  for (let i = 0; i < want.length; i++) {
    const w = want[i]!;
    const g = got[i]!;
    const lim = atol + rtol * (scale ? scale[i]! : Math.abs(w));
    const err = Number.isNaN(g) || Number.isNaN(w) ? Infinity : Math.abs(g - w) - lim;
    if (err > worst) { worst = err; worstI = i; }
  }
  if (worst > 0) expect({ i: worstI, got: got[worstI], want: want[worstI] }).toEqual({ i: worstI, got: want[worstI], want: want[worstI] });
}

export function opSuite(level: 'scalar' | 'avx2' | 'default'): void {
  describe(`cpu ops (${level})`, () => {
    it('runs at the requested SIMD level', () => {
      const f = native().cpuFeatures();
      if (level === 'scalar') expect(f.level).toBe('scalar');
      if (level === 'avx2') expect(f.level === 'avx2' || (!f.avx2 && f.level === 'scalar')).toBe(true);
      if (level === 'default') {
        if (!f.avx512f || !f.avx512bw) expect(f.level).not.toBe('avx512');
        if (f.avx2) expect(f.level).not.toBe('scalar');
      }
    });

    describe('matmul', () => {
      const shapes: [number, number, number][] = [
        [1, 1, 1], [1, 7, 33], [3, 17, 65], [1, 300, 2049], [2, 129, 96], [5, 64, 128], [17, 33, 100], [64, 96, 80], [130, 70, 257], [33, 257, 31],
      ];
      for (const wdt of ['float32', 'bfloat16', 'float16'] as const) {
        for (const [m, n, k] of shapes) {
          const withBias = (m + n) % 2 === 1;
          it(`${wdt} weights, M=${m} N=${n} K=${k}${withBias ? ' + bias' : ''}`, async () => {
            const r = rng(m * 7919 + n * 31 + k);
            const x = randn(r, m * k);
            const w = tensorOf(randn(r, n * k, 0.1), [n, k], wdt);
            const bias = randn(r, n);
            // bf16 weights on an AVX512_BF16 CPU meet activations rounded to bf16 (round to
            // nearest even), with float32 accumulation: the reference rounds them the same way.
            const bf16Dot = wdt === 'bfloat16' && native().cpuFeatures().bf16Matmul === 'bf16dot';
            if (bf16Dot) expect(level).toBe('default');
            const xs = bf16Dot ? Float32Array.from(x, (v) => bf16Value(bf16Bits(v))) : x;
            const want = new Float64Array(m * n);
            const mag = new Float64Array(m * n);
            for (let i = 0; i < m; i++)
              for (let j = 0; j < n; j++) {
                let s = 0;
                let a = 0;
                for (let p = 0; p < k; p++) {
                  s += xs[i * k + p]! * w.vals[j * k + p]!;
                  a += Math.abs(xs[i * k + p]! * w.vals[j * k + p]!);
                }
                want[i * n + j] = s + (withBias ? bias[j]! : 0);
                mag[i * n + j] = a + (withBias ? Math.abs(bias[j]!) : 0);
              }
            const inputs: Record<string, OpTensor> = { x: f32(x, [m, k]), w: w.t };
            if (withBias) inputs.bias = f32(bias, [n]);
            const got = await run('matmul', inputs);
            expectClose(got, want, 1e-6, 2e-6, mag);
          });
        }
      }
      it('3-d activations keep their leading dims', async () => {
        const r = rng(5);
        const x = randn(r, 2 * 3 * 8);
        const w = randn(r, 5 * 8);
        const got = await native().runOp('matmul', 'cpu', { x: f32(x, [2, 3, 8]), w: f32(w, [5, 8]) });
        expect(got.shape).toEqual([2, 3, 5]);
      });
      it('rejects mismatched K with a typed error', async () => {
        await expect(native().runOp('matmul', 'cpu', { x: f32(new Float32Array(6), [2, 3]), w: f32(new Float32Array(8), [2, 4]) })).rejects.toBeInstanceOf(InvalidArgumentError);
      });
    });

    it('embedding gathers rows of bf16/f16/f32 tables with a scale, rejects bad ids', async () => {
      for (const dt of ['float32', 'bfloat16', 'float16'] as const) {
        const r = rng(11);
        const v = 37, h = 19;
        const tab = tensorOf(randn(r, v * h), [v, h], dt);
        const ids = [0, 36, 5, 5, 17];
        const got = await run('embedding', { table: tab.t, ids: i32(ids) }, { scale: 1.5 });
        const want: number[] = [];
        for (const id of ids) for (let j = 0; j < h; j++) want.push(Math.fround(tab.vals[id * h + j]! * 1.5));
        expectClose(got, want, 0, 1e-7);
        await expect(native().runOp('embedding', 'cpu', { table: tab.t, ids: i32([3, 37]) })).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(native().runOp('embedding', 'cpu', { table: tab.t, ids: i32([-1]) })).rejects.toBeInstanceOf(InvalidArgumentError);
      }
    });

    for (const h of [1, 7, 64, 257, 2048]) {
      for (const addOne of [false, true]) {
        it(`rms_norm H=${h}${addOne ? ' (Gemma 1+w)' : ''}`, async () => {
          const r = rng(h + (addOne ? 1 : 0));
          const rows = 5;
          const x = randn(r, rows * h, 3);
          const w = tensorOf(randn(r, h), [h], 'bfloat16');
          const got = await run('rms_norm', { x: f32(x, [rows, h]), w: w.t }, { eps: 1e-5, addOne });
          const want: number[] = [];
          for (let i = 0; i < rows; i++) {
            let ss = 0;
            for (let j = 0; j < h; j++) ss += x[i * h + j]! ** 2;
            const inv = 1 / Math.sqrt(ss / h + 1e-5);
            for (let j = 0; j < h; j++) want.push(x[i * h + j]! * inv * (addOne ? 1 + w.vals[j]! : w.vals[j]!));
          }
          expectClose(got, want, 1e-6, 3e-6);
        });
      }
    }

    for (const h of [1, 9, 300]) {
      it(`layer_norm H=${h} with and without bias`, async () => {
        const r = rng(100 + h);
        const rows = 3;
        const x = randn(r, rows * h, 2);
        for (let i = 0; i < x.length; i++) x[i] = x[i]! + 4;
        const w = randn(r, h);
        const b = randn(r, h);
        for (const withB of [false, true]) {
          const inputs: Record<string, OpTensor> = { x: f32(x, [rows, h]), w: f32(w, [h]) };
          if (withB) inputs.b = f32(b, [h]);
          const got = await run('layer_norm', inputs, { eps: 1e-5 });
          const want: number[] = [];
          for (let i = 0; i < rows; i++) {
            let m = 0;
            for (let j = 0; j < h; j++) m += x[i * h + j]!;
            m /= h;
            let v = 0;
            for (let j = 0; j < h; j++) v += (x[i * h + j]! - m) ** 2;
            v /= h;
            for (let j = 0; j < h; j++) want.push(((x[i * h + j]! - m) / Math.sqrt(v + 1e-5)) * w[j]! + (withB ? b[j]! : 0));
          }
          expectClose(got, want, 2e-5, 1e-5);
        }
      });
    }

    const ropeCases = [
      { t: 1, h: 1, d: 2, rot: 2, inter: false, mscale: 1 },
      { t: 5, h: 3, d: 64, rot: 64, inter: false, mscale: 1 },
      { t: 4, h: 2, d: 64, rot: 32, inter: false, mscale: 1.2 },
      { t: 7, h: 2, d: 80, rot: 20, inter: true, mscale: 1 },
      { t: 3, h: 4, d: 128, rot: 128, inter: true, mscale: 0.9 },
    ];
    for (const c of ropeCases) {
      it(`rope T=${c.t} H=${c.h} D=${c.d} rot=${c.rot} ${c.inter ? 'interleaved' : 'half-split'} mscale=${c.mscale}`, async () => {
        const r = rng(c.d * 13 + c.rot);
        const x = randn(r, c.t * c.h * c.d);
        const pos = Array.from({ length: c.t }, (_, i) => (i * 37 + 5) % 4099);
        const half = c.rot / 2;
        const inv = new Float32Array(half);
        for (let i = 0; i < half; i++) inv[i] = 1 / 10000 ** ((2 * i) / c.rot);
        const got = await run('rope', { x: f32(x, [c.t, c.h, c.d]), positions: i32(pos), invFreq: f32(inv, [half]) },
          { rotDim: c.rot, interleaved: c.inter, mscale: c.mscale });
        const want = Float64Array.from(x);
        for (let t = 0; t < c.t; t++)
          for (let h = 0; h < c.h; h++)
            for (let i = 0; i < half; i++) {
              const ang = Math.fround(pos[t]! * inv[i]!);
              const cs = Math.cos(ang) * c.mscale, sn = Math.sin(ang) * c.mscale;
              const base = (t * c.h + h) * c.d;
              const a = base + (c.inter ? 2 * i : i), b = base + (c.inter ? 2 * i + 1 : i + half);
              want[a] = x[a]! * cs - x[b]! * sn;
              want[b] = x[b]! * cs + x[a]! * sn;
            }
        expectClose(got, want, 2e-6, 2e-6);
      });
    }

    for (const n of [1, 5, 33, 1000, 4099]) {
      it(`softmax width ${n}`, async () => {
        const r = rng(n);
        const rows = 3;
        const x = randn(r, rows * n, 5);
        x[0] = 80; // large values must not overflow
        if (n > 4) x[n + 2] = -Infinity;
        const got = await run('softmax', { x: f32(x, [rows, n]) });
        const want: number[] = [];
        for (let i = 0; i < rows; i++) {
          let mx = -Infinity;
          for (let j = 0; j < n; j++) mx = Math.max(mx, x[i * n + j]!);
          let s = 0;
          for (let j = 0; j < n; j++) s += Math.exp(x[i * n + j]! - mx);
          for (let j = 0; j < n; j++) want.push(Math.exp(x[i * n + j]! - mx) / s);
        }
        expectClose(got, want, 1e-7, 1e-5);
      });
    }

    describe('attention', () => {
      type Case = { name: string; t: number; hq: number; hkv: number; d: number; s: number; window?: number; softcap?: number;
        causal?: boolean; empty?: number[]; cap?: number; kv?: Fl; dv?: number; qStart?: number };
      const cases: Case[] = [
        { name: 'decode, 1 key', t: 1, hq: 1, hkv: 1, d: 8, s: 1 },
        { name: 'decode GQA 4:1 over 37 slots', t: 1, hq: 8, hkv: 2, d: 64, s: 37 },
        { name: 'prefill causal 33 tokens GQA 2:1', t: 33, hq: 4, hkv: 2, d: 16, s: 33 },
        { name: 'prefill long 300 tokens', t: 300, hq: 2, hkv: 1, d: 64, s: 300 },
        { name: 'chunk after a prefix, sliding window 7', t: 9, hq: 4, hkv: 4, d: 32, s: 25, window: 7 },
        { name: 'soft-capped scores (Gemma 2)', t: 6, hq: 4, hkv: 2, d: 24, s: 6, softcap: 5 },
        { name: 'empty slots and cache view with capacity', t: 3, hq: 6, hkv: 3, d: 40, s: 20, empty: [0, 4, 19], cap: 29 },
        { name: 'bidirectional', t: 5, hq: 2, hkv: 1, d: 12, s: 5, causal: false },
        { name: 'bf16 cache, decode GQA 8:1', t: 1, hq: 8, hkv: 1, d: 128, s: 70, kv: 'bfloat16' },
        { name: 'f16 cache, window, 2 queries', t: 2, hq: 4, hkv: 2, d: 64, s: 50, kv: 'float16', window: 16 },
        { name: 'value dim differs from key dim', t: 4, hq: 2, hkv: 2, d: 16, s: 4, dv: 24 },
        { name: 'query that sees no key gets zeros', t: 2, hq: 2, hkv: 1, d: 8, s: 4, qStart: -10 },
      ];
      for (const c of cases) {
        it(c.name, async () => {
          const r = rng(c.t * 1000 + c.s * 7 + c.d);
          const dv = c.dv ?? c.d;
          const q = randn(r, c.t * c.hq * c.d);
          const k = tensorOf(randn(r, c.hkv * c.s * c.d), [c.hkv, c.s, c.d], c.kv ?? 'float32');
          const v = tensorOf(randn(r, c.hkv * c.s * dv), [c.hkv, c.s, dv], c.kv ?? 'float32');
          // keys hold positions 0..s-1 in shuffled slots; queries are the last t positions
          const kPos = Array.from({ length: c.s }, (_, i) => (i * 7) % c.s);
          if (c.s % 7 === 0) for (let i = 0; i < c.s; i++) kPos[i] = c.s - 1 - i;
          for (const e of c.empty ?? []) kPos[e] = -1;
          const qPos = Array.from({ length: c.t }, (_, i) => (c.qStart !== undefined ? c.qStart + i : c.s - c.t + i));
          if (c.qStart !== undefined) qPos[1] = 0; // second query sees key position 0 only
          const scale = 1 / Math.sqrt(c.d);
          const causal = c.causal ?? true;
          const params: OpParams = { scale, causal, window: c.window ?? 0, softcap: c.softcap ?? 0, kvCapacity: c.cap ?? 0 };
          const got = await run('attention', { q: f32(q, [c.t, c.hq, c.d]), k: k.t, v: v.t, qPos: i32(qPos), kPos: i32(kPos) }, params);
          const want = new Float64Array(c.t * c.hq * dv);
          const g = c.hq / c.hkv;
          for (let t = 0; t < c.t; t++)
            for (let h = 0; h < c.hq; h++) {
              const hk = Math.floor(h / g);
              const sc: number[] = [];
              for (let s = 0; s < c.s; s++) {
                const kp = kPos[s]!;
                const vis = kp >= 0 && (!causal || kp <= qPos[t]!) && (!c.window || qPos[t]! - kp < c.window);
                if (!vis) { sc.push(-Infinity); continue; }
                let dot = 0;
                for (let j = 0; j < c.d; j++) dot += q[(t * c.hq + h) * c.d + j]! * k.vals[(hk * c.s + s) * c.d + j]!;
                let z = dot * scale;
                if (c.softcap) z = c.softcap * Math.tanh(z / c.softcap);
                sc.push(z);
              }
              const mx = Math.max(...sc);
              if (mx === -Infinity) continue;
              const e = sc.map((z) => Math.exp(z - mx));
              const sum = e.reduce((a, b) => a + b, 0);
              for (let s = 0; s < c.s; s++)
                for (let j = 0; j < dv; j++) want[(t * c.hq + h) * dv + j] += (e[s]! / sum) * v.vals[(hk * c.s + s) * dv + j]!;
            }
          expectClose(got, want, 2e-5, 1e-4);
          if (c.qStart !== undefined) expect(Array.from(got.slice(0, c.hq * dv)).every((z) => z === 0)).toBe(true);
        });
      }
      it('rejects a head count that is not a multiple of the kv heads', async () => {
        const q = f32(new Float32Array(3 * 8), [1, 3, 8]);
        const k = f32(new Float32Array(2 * 4 * 8), [2, 4, 8]);
        await expect(native().runOp('attention', 'cpu', { q, k, v: k, qPos: i32([3]), kPos: i32([0, 1, 2, 3]) })).rejects.toBeInstanceOf(InvalidArgumentError);
      });
    });

    for (const act of ['silu', 'gelu', 'gelu_tanh'] as const) {
      for (const n of [1, 7, 8193]) {
        it(`gated_act ${act} n=${n}`, async () => {
          const r = rng(n + act.length);
          const g = randn(r, n, 4);
          const u = randn(r, n);
          g[0] = -30; if (n > 1) g[1] = 30;
          const got = await run('gated_act', { gate: f32(g, [1, n]), up: f32(u, [1, n]) }, { act });
          const erf = (x: number): number => {
            // 2/sqrt(pi) * integral_0^x exp(-t^2) dt by Simpson's rule (error far below 1e-9 here)
            if (Math.abs(x) > 8) return Math.sign(x);
            const steps = 2000, hstep = x / steps;
            let s = 1 + Math.exp(-x * x);
            for (let i = 1; i < steps; i++) s += (i % 2 ? 4 : 2) * Math.exp(-((i * hstep) ** 2));
            return (2 / Math.sqrt(Math.PI)) * (s * hstep) / 3;
          };
          const want = Array.from(g, (x, i) => {
            let a: number;
            if (act === 'silu') a = x / (1 + Math.exp(-x));
            else if (act === 'gelu') a = 0.5 * x * (1 + erf(x / Math.SQRT2));
            else a = 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
            return a * u[i]!;
          });
          expectClose(got, want, 1e-6, 1e-5);
        });
      }
    }

    it('gated_act silu and gelu_tanh over the whole float range of exp', async () => {
      const n = 4001;
      const g = Float32Array.from({ length: n }, (_, i) => -100 + (200 * i) / (n - 1));
      const u = Float32Array.from({ length: n }, (_, i) => 1 + (i % 3));
      for (const act of ['silu', 'gelu_tanh'] as const) {
        const got = await run('gated_act', { gate: f32(g, [n]), up: f32(u, [n]) }, { act });
        const want = Array.from(g, (x, i) =>
          (act === 'silu' ? x / (1 + Math.exp(-x)) : 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)))) * u[i]!);
        expectClose(got, want, 1e-6, 1e-5);
      }
    });

    it('matmul_accumulate adds x · w^T into the residual rows', async () => {
      const r = rng(91);
      const m = 5, n = 33, k = 70;
      const x = randn(r, m * k), w = randn(r, n * k), res = randn(r, m * n, 3);
      const got = await run('matmul_accumulate', { x: f32(x, [m, k]), w: f32(w, [n, k]), resid: f32(res, [m, n]) });
      const want = Array.from({ length: m * n }, (_, i) => {
        const row = Math.floor(i / n), col = i % n;
        let acc = res[i]!;
        for (let j = 0; j < k; j++) acc += x[row * k + j]! * w[col * k + j]!;
        return acc;
      });
      expectClose(got, want, 1e-4, 1e-5);
    });

    for (const act of ['silu', 'gelu_tanh'] as const) {
      it(`rms_scaled_gated_act ${act} scales each row by its residual's 1/rms`, async () => {
        const r = rng(act.length * 13);
        const t = 3, f = 37, hd = 129, eps = 1e-5;
        const h = randn(r, t * 2 * f, 20), x = randn(r, t * hd, 2);
        x.fill(0, 2 * hd);  // an all-zero row: the scale is 1 / sqrt(eps)
        const got = await run('rms_scaled_gated_act', { h: f32(h, [t, 2 * f]), x: f32(x, [t, hd]) }, { eps, act });
        const want: number[] = [];
        for (let row = 0; row < t; row++) {
          let ss = 0;
          for (let i = 0; i < hd; i++) ss += x[row * hd + i]! ** 2;
          const sc = 1 / Math.sqrt(ss / hd + eps);
          for (let j = 0; j < f; j++) {
            const g = sc * h[row * 2 * f + j]!, u = sc * h[row * 2 * f + f + j]!;
            const a = act === 'silu' ? g / (1 + Math.exp(-g)) : 0.5 * g * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (g + 0.044715 * g ** 3)));
            want.push(a * u);
          }
        }
        expectClose(got, want, 1e-5, 1e-5);
      });
    }

    it('add and softcap', async () => {
      const r = rng(3);
      const a = randn(r, 1001, 30);
      const b = randn(r, 1001);
      const sum = await run('add', { a: f32(a, [7, 143]), b: f32(b, [7, 143]) });
      expectClose(sum, Array.from(a, (x, i) => Math.fround(x + b[i]!)), 0, 0);
      const capped = await run('softcap', { x: f32(a, [1001]) }, { cap: 30 });
      expectClose(capped, Array.from(a, (x) => 30 * Math.tanh(x / 30)), 1e-6, 1e-6);
    });

    it('kv_write scatters rows into a cache view and converts dtypes', async () => {
      const r = rng(9);
      const t = 3, h = 2, d = 5, s = 8;
      const src = randn(r, t * h * d);
      const slots = [6, 0, 3];
      for (const dt of ['float32', 'bfloat16', 'float16'] as const) {
        const init = tensorOf(randn(r, h * s * d), [h, s, d], dt);
        const res = await native().runOp('kv_write', 'cpu', { src: f32(src, [t, h, d]), slots: i32(slots), cache: init.t }, { kvCapacity: 11 });
        expect(res.shape).toEqual([h, s, d]);
        expect(res.dtype).toBe(dt);
        const want = Float64Array.from(init.vals);
        for (let ti = 0; ti < t; ti++)
          for (let hi = 0; hi < h; hi++)
            for (let j = 0; j < d; j++) {
              const x = src[(ti * h + hi) * d + j]!;
              want[(hi * s + slots[ti]!) * d + j] = dt === 'float32' ? x : dt === 'bfloat16' ? bf16Value(bf16Bits(x)) : f16Value(f16Bits(x));
            }
        const vals = dt === 'float32' ? (res.data as Float32Array) : Array.from(res.data as Uint16Array, (b) => (dt === 'bfloat16' ? bf16Value(b) : f16Value(b)));
        expectClose(vals, want, 0, 0);
        await expect(native().runOp('kv_write', 'cpu', { src: f32(src, [t, h, d]), slots: i32([1, 2, 8]), cache: init.t })).rejects.toBeInstanceOf(InvalidArgumentError);
      }
    });

    it('convert rounds to nearest even between float32, bfloat16 and float16', async () => {
      const special = [0, -0, 1, -1, 65504, 65520, 1e-8, 6e-8, 5.96e-8, 2 ** -24 * 1.5, 2 ** -14, 1 + 2 ** -11, 1 + 3 * 2 ** -11,
        1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.0e38, Infinity, -Infinity, NaN, 1e-40];
      const r = rng(77);
      const x = Float32Array.from([...special, ...randn(r, 500, 100)]);
      const toBf = await native().runOp('convert', 'cpu', { src: f32(x, [x.length]) }, { outDtype: 'bfloat16' });
      const toF16 = await native().runOp('convert', 'cpu', { src: f32(x, [x.length]) }, { outDtype: 'float16' });
      const bb = toBf.data as Uint16Array;
      const hb = toF16.data as Uint16Array;
      for (let i = 0; i < x.length; i++) {
        if (Number.isNaN(x[i]!)) {
          expect(Number.isNaN(bf16Value(bb[i]!)) && Number.isNaN(f16Value(hb[i]!))).toBe(true);
          continue;
        }
        expect([i, bb[i]]).toEqual([i, bf16Bits(x[i]!)]);
        expect([i, hb[i]]).toEqual([i, f16Bits(x[i]!)]);
      }
      const back = await run('convert', { src: toF16 }, { outDtype: 'float32' });
      for (let i = 0; i < x.length; i++) if (!Number.isNaN(x[i]!)) expect(back[i]).toBe(Math.fround(f16Value(hb[i]!)));
      const b2h = await native().runOp('convert', 'cpu', { src: toBf }, { outDtype: 'float16' });
      for (let i = 0; i < x.length; i++)
        if (!Number.isNaN(x[i]!)) expect((b2h.data as Uint16Array)[i]).toBe(f16Bits(bf16Value(bb[i]!)));
    });

    it('reports bad inputs as typed errors, never crashes', async () => {
      const x = f32(new Float32Array(4), [2, 2]);
      await expect(native().runOp('softmax', 'cpu', { x: { data: new Float32Array(3), shape: [2, 2], dtype: 'float32' } })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('rms_norm', 'cpu', { x, w: f32(new Float32Array(3), [3]) })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('rope', 'cpu', { x: f32(new Float32Array(8), [1, 1, 8]), positions: i32([0]), invFreq: f32(new Float32Array(3), [3]) }, { rotDim: 6 })).resolves.toBeDefined();
      await expect(native().runOp('rope', 'cpu', { x: f32(new Float32Array(8), [1, 1, 8]), positions: i32([0]), invFreq: f32(new Float32Array(3), [3]) }, { rotDim: 10 })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('softcap', 'cpu', { x }, { cap: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('gated_act', 'cpu', { gate: x, up: x }, { act: 'relu' })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('rms_scaled_gated_act', 'cpu', { h: f32(new Float32Array(6), [2, 3]), x: f32(new Float32Array(4), [2, 2]) }))
        .rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('matmul_accumulate', 'cpu', { x: f32(new Float32Array(6), [2, 3]), w: f32(new Float32Array(6), [2, 3]) }))
        .rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(native().runOp('nope' as 'add', 'cpu', { a: x, b: x })).rejects.toBeInstanceOf(InvalidArgumentError);
    });
  });
}
