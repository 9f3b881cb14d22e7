// The native sampling chain against hand-computed distributions. Logits L below; their softmax,
// sorted (token: p, cumulative, p / p_max), computed by hand (and checked with a calculator):
//   3: .4027 .4027 1      6: .2443 .6470 .6065   0: .1482 .7952 .3679   7: .0899 .8850 .2231
//   1: .0545 .9395 .1353  2: .0331 .9726 .0821   5: .0201 .9926 .0498   4: .0074 1      .0183
import { describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { native } from '../lib/native/index.js';
import { resolveSampling, Sampler, SAMPLING_OPTION_NAMES } from '../lib/sampling/index.js';

const L = new Float32Array([2.0, 1.0, 0.5, 3.0, -1.0, 0.0, 2.5, 1.5]);
const V = L.length;

function softmax(x: ArrayLike<number>, keep?: Set<number>, t = 1): number[] {
  const idx = [...Array(x.length).keys()].filter((i) => !keep || keep.has(i));
  const m = idx.reduce((a, i) => Math.max(a, x[i]!), -Infinity);
  const w = new Array<number>(x.length).fill(0);
  let z = 0;
  for (const i of idx) { w[i] = Math.exp((x[i]! - m) / t); z += w[i]!; }
  return w.map((v) => v / z);
}

function keptSet(p: Float32Array): number[] {
  return [...p.keys()].filter((i) => p[i]! > 0).sort((a, b) => a - b);
}

function expectClose(got: Float32Array, want: number[], tol = 1e-6) {
  expect(got.length).toBe(want.length);
  want.forEach((w, i) => expect(Math.abs(got[i]! - w), `index ${i}: ${got[i]} vs ${w}`).toBeLessThan(tol));
}

describe('filters keep exactly the right set', () => {
  it('temperature 1 and 0.5: the plain softmax', () => {
    expectClose(new Sampler({}, V).distribution(L), softmax(L));
    expectClose(new Sampler({ temperature: 0.5 }, V).distribution(L), softmax(L, undefined, 0.5));
  });
  it('top-k', () => {
    const p = new Sampler({ topK: 3 }, V).distribution(L);
    expect(keptSet(p)).toEqual([0, 3, 6]);
    expectClose(p, softmax(L, new Set([0, 3, 6])));
    // Ties go to the lower id.
    const tied = new Float32Array([1, 5, 5, 5, 0]);
    expect(keptSet(new Sampler({ topK: 2 }, 5).distribution(tied))).toEqual([1, 2]);
    // k >= vocab keeps everything.
    expect(keptSet(new Sampler({ topK: 100 }, V).distribution(L))).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
  it('top-k over a large vocabulary with many ties equals sorting every token (value desc, id asc)', () => {
    // Logits on a coarse grid, so hundreds of tokens tie at the cut; the native path keeps a heap.
    const n = 20000;
    let s = 12345;
    const big = new Float32Array(n).map(() => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return ((s >>> 8) % 64) / 8; });
    for (const [k, t] of [[40, 0.7], [1, 1], [777, 1.3]] as const) {
      const order = [...big.keys()].sort((a, b) => (big[b]! - big[a]!) || a - b);
      const keep = new Set(order.slice(0, k));
      const p = new Sampler({ topK: k, temperature: t }, n).distribution(big);
      expect(keptSet(p)).toEqual([...keep].sort((a, b) => a - b));
      expectClose(p, softmax(big, keep, t));
    }
  });
  it('top-p: the smallest most-likely set reaching p', () => {
    expect(keptSet(new Sampler({ topP: 0.6 }, V).distribution(L))).toEqual([3, 6]);      // .4027 < .6 <= .6470
    expect(keptSet(new Sampler({ topP: 0.65 }, V).distribution(L))).toEqual([0, 3, 6]);  // .6470 < .65
    expect(keptSet(new Sampler({ topP: 0.4 }, V).distribution(L))).toEqual([3]);
    expect(keptSet(new Sampler({ topP: 0.95 }, V).distribution(L))).toEqual([0, 1, 2, 3, 6, 7]);  // .9395 < .95 <= .9726
    expectClose(new Sampler({ topP: 0.6 }, V).distribution(L), softmax(L, new Set([3, 6])));
  });
  it('top-p over a large vocabulary equals a full sort (flat, peaked and tied logits)', () => {
    let seed = 99;
    const rnd = () => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return seed / 2 ** 32; };
    const n = 151_936;
    for (const [label, make] of [
      ['flat', () => rnd() * 0.5],
      ['peaked', () => (rnd() < 0.001 ? 8 + rnd() * 4 : rnd() * 2)],
      ['tied', () => Math.floor(rnd() * 4)],
    ] as const) {
      const x = Float32Array.from({ length: n }, make);
      for (const topP of [0.05, 0.5, 0.9, 0.999]) {
        const w = softmax(x);
        const order = [...w.keys()].sort((a, b) => (w[b]! !== w[a]! ? w[b]! - w[a]! : a - b));
        const want: number[] = [];
        let cum = 0;
        for (const i of order) { if (cum >= topP) break; want.push(i); cum += w[i]!; }
        const got = keptSet(new Sampler({ topP }, n).distribution(x));
        expect(got.length, `${label} top-p ${topP}`).toBe(want.length);
        expect(got, `${label} top-p ${topP}`).toEqual(want.sort((a, b) => a - b));
      }
    }
  });
  it('min-p: tokens at least p x the most likely', () => {
    expect(keptSet(new Sampler({ minP: 0.3 }, V).distribution(L))).toEqual([0, 3, 6]);       // .3679 >= .3 > .2231
    expect(keptSet(new Sampler({ minP: 0.1 }, V).distribution(L))).toEqual([0, 1, 3, 6, 7]); // .1353 >= .1 > .0821
    expect(keptSet(new Sampler({ minP: 1 }, V).distribution(L))).toEqual([3]);
  });
  it('filters chain on the renormalised distribution: top-k 4 then top-p 0.8', () => {
    // Over {3,6,0,7} (mass .885): cumulative .455, .731, .8985 -> {3,6,0}. Unrenormalised would keep 7 too.
    expect(keptSet(new Sampler({ topK: 4, topP: 0.8 }, V).distribution(L))).toEqual([0, 3, 6]);
  });
  it('temperature applies before the filters', () => {
    // At T=0.5 the sorted probabilities are .6285 .2313 .0851 ...: top-p 0.6 keeps only token 3.
    expect(keptSet(new Sampler({ temperature: 0.5, topP: 0.6 }, V).distribution(L))).toEqual([3]);
  });
  it('greedy: one-hot on the argmax, lowest id on ties', () => {
    expect([...new Sampler({ temperature: 0 }, V).distribution(L)]).toEqual([0, 0, 0, 1, 0, 0, 0, 0]);
    const s = new Sampler({ temperature: 0 }, 4);
    expect(s.sample(new Float32Array([0, 7, 7, 1])).token).toBe(1);
  });
});

describe('penalties and bias change exactly the right logits', () => {
  const history = [3, 3, 1, 4];
  it('repetition penalty divides positive and multiplies negative logits of seen tokens', () => {
    const s = new Sampler({ repetitionPenalty: 2 }, V);
    s.accept(history);
    expect([...s.process(L)]).toEqual([2.0, 0.5, 0.5, 1.5, -2.0, 0.0, 2.5, 1.5]);
  });
  it('presence and frequency penalties subtract once / per occurrence', () => {
    const s = new Sampler({ presencePenalty: 0.5, frequencyPenalty: 0.25 }, V);
    s.accept(history);
    // token 3 (x2): 3 - .5 - .5; token 1 (x1): 1 - .5 - .25; token 4 (x1): -1 - .75
    expect([...s.process(L)]).toEqual([2.0, 0.25, 0.5, 2.0, -1.75, 0.0, 2.5, 1.5]);
  });
  it('all three, repetition first', () => {
    const s = new Sampler({ repetitionPenalty: 2, presencePenalty: 0.5, frequencyPenalty: 0.25 }, V);
    s.accept(history);
    expect([...s.process(L)]).toEqual([2.0, -0.25, 0.5, 0.5, -2.75, 0.0, 2.5, 1.5]);
  });
  it('only the last repetitionContextSize tokens count', () => {
    const s = new Sampler({ repetitionPenalty: 2, repetitionContextSize: 2 }, V);
    s.accept(history);  // window [1, 4]
    expect([...s.process(L)]).toEqual([2.0, 0.5, 0.5, 3.0, -2.0, 0.0, 2.5, 1.5]);
    const off = new Sampler({ repetitionPenalty: 2, repetitionContextSize: 0 }, V);
    off.accept(history);
    expect([...off.process(L)]).toEqual([...L]);
  });
  it('logit bias adds to the named tokens and steers greedy choice', () => {
    const s = new Sampler({ logitBias: { 5: 10, 3: -3 }, temperature: 0 }, V);
    expect([...s.process(L)]).toEqual([2.0, 1.0, 0.5, 0.0, -1.0, 10.0, 2.5, 1.5]);
    expect(s.sample(L).token).toBe(5);
    expect(new Sampler({ logitBias: new Map([[7, 100]]) }, V).sample(L).token).toBe(7);
  });
});

describe('draws', () => {
  it('same seed, same tokens; another seed, other tokens', () => {
    const draw = (seed: number) => {
      const s = new Sampler({ seed }, V);
      return Array.from({ length: 200 }, () => s.sample(L).token);
    };
    expect(draw(42)).toEqual(draw(42));
    expect(draw(42)).not.toEqual(draw(43));
  });
  it('frequencies match the distribution (20000 draws, 5 sigma)', () => {
    const s = new Sampler({ seed: 7, topK: 5 }, V);
    const p = softmax(L, new Set([3, 6, 0, 7, 1]));
    const n = 20000;
    const counts = new Array<number>(V).fill(0);
    for (let i = 0; i < n; i++) counts[s.sample(L).token]!++;
    for (let i = 0; i < V; i++) {
      const sigma = Math.sqrt(n * p[i]! * (1 - p[i]!));
      expect(Math.abs(counts[i]! - n * p[i]!), `token ${i}`).toBeLessThanOrEqual(5 * sigma + (p[i] === 0 ? 0 : 1));
    }
  });
  it('logprobs are log-softmax of the processed logits; top alternatives best first', () => {
    const s = new Sampler({ temperature: 0, topLogprobs: 3 }, V);
    const r = s.sample(L);
    const lse = Math.log(L.reduce((a, x) => a + Math.exp(x), 0));
    expect(r.token).toBe(3);
    expect(r.logprob).toBeCloseTo(3 - lse, 5);
    expect(r.topLogprobs!.map((t) => t.token)).toEqual([3, 6, 0]);
    expect(r.topLogprobs![1]!.logprob).toBeCloseTo(2.5 - lse, 5);
  });
  it('non-finite logits are a typed error, not a crash', () => {
    const bad = new Float32Array(L);
    bad[2] = NaN;
    expect(() => new Sampler({}, V).sample(bad)).toThrow(/NaN/);
    expect(() => new Sampler({}, V).sample(new Float32Array(3))).toThrow(InvalidArgumentError);
  });
});

describe('option validation', () => {
  const bad: Record<string, unknown[]> = {
    temperature: ['1', NaN, Infinity, -Infinity, -0.1, 1e9, true, {}],
    topK: ['5', NaN, Infinity, -1, 2.5, 1e12, false],
    topP: ['0.5', NaN, Infinity, -Infinity, 0, -0.5, 1.5, 1e9],
    minP: ['0', NaN, Infinity, -0.1, 1.01, 1e9],
    repetitionPenalty: ['1', NaN, Infinity, 0, -1, 1e9],
    repetitionContextSize: ['64', NaN, Infinity, -1, 1.5, 1e12],
    presencePenalty: ['0', NaN, Infinity, -Infinity, -3, 1e9],
    frequencyPenalty: ['0', NaN, -Infinity, 2.5, 1e9],
    logitBias: ['x', 5, [1, 2], { 1: NaN }, { 1: Infinity }, { '-1': 1 }, { 1.5: 1 }, { 1: 1e9 }, { 1e12: 1 }, { a: 1 }],
    seed: ['1', NaN, Infinity, -1, 1.5, 2 ** 60],
    logprobs: ['yes', 1, {}],
    topLogprobs: ['1', NaN, Infinity, -1, 2.5, 21, 1e9],
  };
  it('covers every option', () => {
    expect(Object.keys(bad).sort()).toEqual([...SAMPLING_OPTION_NAMES].sort());
  });
  for (const [name, values] of Object.entries(bad)) {
    it(`${name}: bad values raise InvalidArgumentError naming it`, () => {
      for (const v of values) {
        let err: unknown;
        try {
          resolveSampling({ [name]: v }, 1000);
        } catch (e) {
          err = e;
        }
        expect(err, `${name} = ${String(v)}`).toBeInstanceOf(InvalidArgumentError);
        expect((err as InvalidArgumentError).field).toBe(name);
      }
      // null and undefined mean "default".
      expect(() => resolveSampling({ [name]: null }, 1000)).not.toThrow();
      expect(() => resolveSampling({ [name]: undefined }, 1000)).not.toThrow();
    });
  }
  it('the native layer re-checks what it is given (typed errors, no crash)', () => {
    const S = native().Sampler;
    expect(() => new S({ topP: 0 }, 8)).toThrow(InvalidArgumentError);
    expect(() => new S({ temperature: NaN }, 8)).toThrow(InvalidArgumentError);
    expect(() => new S({ logitBias: [[99, 1]] }, 8)).toThrow(InvalidArgumentError);
    expect(() => new S({ topK: '3' } as never, 8)).toThrow(InvalidArgumentError);
    expect(() => new S({}, -1)).toThrow(InvalidArgumentError);
  });
});
