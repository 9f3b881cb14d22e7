// Opt-in GPU check (MLXB_TEST_CUDA=1): sampling on the device end to end. A GenerationSequence on
// a CUDA model samples where the logits are (only token ids come back); a second instance of the
// model gives the same logits to the host through a session, and the host Sampler with the same
// seed must pick the same tokens (up to ties at float rounding: none expected on these prompts).
// Also the batched engine: the same seeded requests with device sampling and with host sampling
// (deviceArgmax: false) give the same tokens. The kernels themselves are checked against the
// host Sampler by cuda_ops_check (test/native/sample_check.h).
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';
import type { NativeEngineEvent } from '../types/native/engine.js';
import type { NativeSamplingOptions } from '../types/native/generation.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';
const ROOT = join(import.meta.dirname, 'fixtures', 'models');
const PROMPT = Int32Array.from([1, 15, 27, 3, 99, 4, 42, 8]);
const STEPS = 24;

const OPTIONS: Array<[string, NativeSamplingOptions]> = [
  ['temperature 0.9', { temperature: 0.9, seed: 1 }],
  ['top-p 0.9', { temperature: 1.0, topP: 0.9, seed: 2 }],
  ['top-k 20 + min-p 0.02', { temperature: 1.1, topK: 20, minP: 0.02, seed: 3 }],
  ['penalties + bias, top-p 0.8', { temperature: 1.0, topP: 0.8, repetitionPenalty: 1.3, presencePenalty: 0.4, frequencyPenalty: 0.2, logitBias: [[5, 3], [6, -50]], seed: 4 }],
  ['greedy + repetition penalty', { temperature: 0, repetitionPenalty: 1.5, seed: 5 }],
];

describe.skipIf(!enabled)('device sampling on CUDA matches the host sampler', () => {
  for (const name of ['llama', 'qwen2', 'gemma2']) {
    it(`${name}: GenerationSequence tokens == session logits + host Sampler`, async () => {
      const n = native();
      const dir = join(ROOT, name);
      const a = await n.loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
      const b = await n.loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
      try {
        const vocab = n.modelVocabSize(a);
        for (const [label, opts] of OPTIONS) {
          const seq = new n.GenerationSequence(a, opts, PROMPT.length + STEPS + 1);
          const got: number[] = [(await seq.prefill(PROMPT)).token];
          for (let i = 1; i < STEPS; i++) got.push((await seq.step(got[i - 1]!)).token);
          seq.dispose();

          const sampler = new n.Sampler(opts, vocab);
          const session = b.createSession(PROMPT.length + STEPS + 1);
          sampler.accept(PROMPT);
          const want: number[] = [sampler.sample(await session.forward(PROMPT, false)).token];
          for (let i = 1; i < STEPS; i++) {
            sampler.accept(want[i - 1]!);
            want.push(sampler.sample(await session.forward(Int32Array.of(want[i - 1]!), false)).token);
          }
          session.dispose();
          expect(got, `${name} ${label}`).toEqual(want);
        }
      } finally {
        a.dispose();
        b.dispose();
      }
    });
  }
});

describe.skipIf(!enabled)('several steps per call on CUDA (GenerationSequence.steps)', () => {
  for (const name of ['llama', 'gemma2']) {
    it(`${name}: greedy bursts (chained on the device) and seeded sampled bursts == one step per call`, async () => {
      const n = native();
      const model = await n.loadModel(join(ROOT, name), { device: 'cuda', dtype: 'bfloat16' });
      try {
        for (const opts of [{ temperature: 0 }, { temperature: 0.9, seed: 8 }] as NativeSamplingOptions[]) {
          const one = new n.GenerationSequence(model, opts, PROMPT.length + 3 * STEPS);
          const want: number[] = [(await one.prefill(PROMPT)).token];
          while (want.length < 2 * STEPS) want.push((await one.step(want[want.length - 1]!)).token);
          one.dispose();
          const seq = new n.GenerationSequence(model, opts, PROMPT.length + 3 * STEPS);
          const got: number[] = [(await seq.prefill(PROMPT)).token];
          while (got.length < 2 * STEPS) got.push(...(await seq.steps(got[got.length - 1]!, 11)).map((s) => s.token));
          seq.dispose();
          expect(got.slice(0, 2 * STEPS), `${name} ${JSON.stringify(opts)}`).toEqual(want);
          if (opts.temperature !== 0) continue;
          // A stop id mid-burst: the burst ends there; the greedy chain ran one step past it, so
          // the sequence has ended and refuses more steps.
          const stop = want[5]!;
          const cut = want.indexOf(stop);
          const s2 = new n.GenerationSequence(model, opts, PROMPT.length + 3 * STEPS);
          const b = [(await s2.prefill(PROMPT)).token];
          if (cut > 0) {
            b.push(...(await s2.steps(b[0]!, 16, Int32Array.of(stop))).map((s) => s.token));
            expect(b).toEqual(want.slice(0, cut + 1));
            await expect(s2.step(stop)).rejects.toThrow(/ended at a stop token/);
          }
          s2.dispose();
        }
      } finally {
        model.dispose();
      }
    });
  }
});

/** Tokens per request of one engine run over `requests` (all submitted at once). */
async function engineTokens(model: object, deviceSampling: boolean, requests: NativeSamplingOptions[]): Promise<number[][]> {
  const n = native();
  const out: number[][] = requests.map(() => []);
  await new Promise<void>((resolve, reject) => {
    const engine = new n.InferenceEngine(model, {
      maxRows: 8, maxQueue: 16, blockSize: 16, kvBlocks: 64, prefixCacheBlocks: 0, prefillChunk: 64, prefillBudget: 256,
      maxContext: 256, fingerprint: 'sampling-test', batchInvariant: true, deviceArgmax: deviceSampling,
    }, (events: NativeEngineEvent[], last: boolean) => {
      for (const e of events) {
        if (e.error) reject(new Error(e.error));
        if (e.token >= 0) out[e.id]!.push(e.token);
      }
      if (last) resolve();
    });
    requests.forEach((opts, id) => engine.submit(id, PROMPT, STEPS, new Int32Array(0), opts, ''));
    engine.close(false);
  });
  return out;
}

describe.skipIf(!enabled)('engine on CUDA: device sampling == host sampling', () => {
  it('llama: seeded requests in one batch give the same tokens both ways', async () => {
    const model = await native().loadModel(join(ROOT, 'llama'), { device: 'cuda', dtype: 'bfloat16' });
    try {
      const requests = OPTIONS.map(([, o]) => o);
      const device = await engineTokens(model, true, requests);
      const host = await engineTokens(model, false, requests);
      expect(device.map((t) => t.length)).toEqual(requests.map(() => STEPS));
      expect(device).toEqual(host);
    } finally {
      model.dispose();
    }
  });
});
