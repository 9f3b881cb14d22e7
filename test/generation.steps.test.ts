// GenerationSequence.steps(): several steps per native call (what generate() asks for), against
// the same sequence driven one step() per call, on the table model and on a real model fixture
// (CPU). Stop ids end a burst after the stop; bad counts and a full sequence are typed errors.
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { generate } from '../lib/generation/index.js';
import { native } from '../lib/native/index.js';
import type { NativeGenerationSequence, NativeSamplingOptions } from '../types/native/generation.js';
import { tableGreedy, tinyModel } from './helpers/tiny_text_model.js';

const PROMPT = Int32Array.from([1, 2, 3]);

async function perStep(seq: NativeGenerationSequence, n: number): Promise<number[]> {
  const out = [(await seq.prefill(PROMPT)).token];
  while (out.length < n) out.push((await seq.step(out[out.length - 1]!)).token);
  return out;
}

async function bursts(seq: NativeGenerationSequence, n: number, size: number, stop?: Int32Array): Promise<number[][]> {
  const first = (await seq.prefill(PROMPT)).token;
  const got: number[][] = [[first]];
  let count = 1;
  let last = first;
  while (count < n) {
    const b = await seq.steps(last, Math.min(size, n - count), stop);
    got.push(b.map((s) => s.token));
    count += b.length;
    last = b[b.length - 1]!.token;
    if (stop && stop.includes(last)) break;
  }
  return got;
}

const MODES: Array<[string, NativeSamplingOptions]> = [
  ['greedy', { temperature: 0 }],
  ['temperature 0.9, seeded', { temperature: 0.9, seed: 11 }],
  ['top-p 0.8 + repetition penalty, seeded', { temperature: 1.0, topP: 0.8, repetitionPenalty: 1.3, seed: 12 }],
];

describe('GenerationSequence.steps', () => {
  const n = native();
  for (const [label, opts] of MODES) {
    it(`table model, ${label}: bursts of 1, 5 and 16 give the per-step tokens`, async () => {
      const m = tinyModel({ seed: 5 });
      const want = await perStep(new n.GenerationSequence(m.nativeHandle, opts, 64), 40);
      if (opts.temperature === 0) expect(want.slice(1)).toEqual(tableGreedy(m.table, want[0]!, 39));
      for (const size of [1, 5, 16]) {
        const seq = new n.GenerationSequence(m.nativeHandle, opts, 64);
        const got = await bursts(seq, 40, size);
        seq.dispose();
        expect(got.flat(), `burst ${size}`).toEqual(want);
        expect(got.slice(1, -1).every((b) => b.length === size)).toBe(true);
      }
    });
  }

  it('real model (llama fixture, CPU): bursts of 7 give the per-step tokens', async () => {
    const model = await n.loadModel(join(import.meta.dirname, 'fixtures', 'models', 'llama'), { device: 'cpu' });
    try {
      for (const [label, opts] of MODES) {
        const want = await perStep(new n.GenerationSequence(model, opts, 64), 30);
        const got = await bursts(new n.GenerationSequence(model, opts, 64), 30, 7);
        expect(got.flat(), label).toEqual(want);
      }
    } finally {
      model.dispose();
    }
  });

  it('a burst ends right after a stop id', async () => {
    const m = tinyModel({ seed: 5 });
    const want = await perStep(new n.GenerationSequence(m.nativeHandle, { temperature: 0 }, 64), 30);
    const stopId = want[4]!;  // the 5th token (or an earlier equal one) ends the burst
    const first = want.indexOf(stopId);
    const seq = new n.GenerationSequence(m.nativeHandle, { temperature: 0 }, 64);
    const got = await bursts(seq, 30, 16, Int32Array.of(stopId));
    seq.dispose();
    expect(got.flat()).toEqual(want.slice(0, first + 1));
  });

  it('stops at the capacity; a full sequence and bad counts are typed errors', async () => {
    const m = tinyModel({ seed: 5 });
    const seq = new n.GenerationSequence(m.nativeHandle, { temperature: 0 }, PROMPT.length + 6);
    const t = (await seq.prefill(PROMPT)).token;
    const b = await seq.steps(t, 100);
    expect(b.length).toBe(6);  // prompt + 6 committed tokens fill the capacity
    await expect(seq.steps(b[5]!.token, 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    for (const bad of [0, -1, 1.5, 5000, Number.NaN]) {
      expect(() => seq.steps(t, bad), String(bad)).toThrow(InvalidArgumentError);
    }
    expect(() => seq.steps(t, 2, new Float32Array(2) as unknown as Int32Array)).toThrow(InvalidArgumentError);
    seq.dispose();
  });

  it('generate() on the table model still gives the table greedy continuation', async () => {
    const m = tinyModel({ seed: 9 });
    const r = await generate(m, [1, 2, 3], { maxTokens: 50, stopTokenIds: [] }).complete();
    expect(r.tokens.slice(1)).toEqual(tableGreedy(m.table, r.tokens[0]!, 49));
  });
});
