// Opt-in GPU check (MLXB_TEST_CUDA=1): final hidden states on CUDA (bf16), every oracle fixture.
// (1) Each row's cosine similarity with the CPU float32 hidden states exceeds 0.999 (bf16 weights
// and activations against float32). (2) The CUDA hidden states times the LM head read from the
// safetensors file give the CUDA logits within 2e-2 of the row's largest |logit| (the device
// multiplies bf16-rounded hidden states and rounds the logits to bf16). (3) 'last' and 'mean'
// pooling equal the last row (up to bf16 rounding) and the average of the rows.
import { describe, expect, it } from 'vitest';

import { embed } from '../lib/embeddings/index.js';
import { loadModel } from '../lib/models/index.js';
import { forwardSequence, hiddenStates } from '../lib/scoring/index.js';
import { headLogits, readLmHead, worstRelative } from './helpers/lm_head.js';
import { fixtureDir, fixtureNames, oracle } from './helpers/model-fixtures.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';

describe.skipIf(!enabled)('hidden states on CUDA', () => {
  for (const name of fixtureNames()) {
    it(`${name}: CUDA bf16 hidden states against the CPU, the CUDA logits and pooling`, async () => {
      const ids = oracle(name).prompt_ids;
      await using cpu = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'float32' });
      await using gpu = await loadModel(fixtureDir(name), { device: 'cuda', dtype: 'bfloat16' });
      const H = gpu.config.hiddenSize, T = ids.length;
      const ref = await hiddenStates(cpu, ids);
      const got = await hiddenStates(gpu, ids);
      expect(got.length).toBe(T * H);
      for (let t = 0; t < T; t++) {
        let dot = 0, a = 0, b = 0;
        for (let j = 0; j < H; j++) {
          dot += got[t * H + j]! * ref[t * H + j]!;
          a += got[t * H + j]! ** 2;
          b += ref[t * H + j]! ** 2;
        }
        expect(dot / Math.sqrt(a * b), `${name} row ${t}`).toBeGreaterThan(0.999);
      }
      const head = readLmHead(fixtureDir(name));
      expect(worstRelative(headLogits(head, got), await forwardSequence(gpu, ids), head.vocab)).toBeLessThan(2e-2);
      const last = await embed({ model: gpu }, ids, { normalize: false });
      // The last-row path adds the residual, rounds, then normalises one row; the all-rows path
      // fuses the add into the norm: equal up to bf16 rounding.
      const row = got.subarray((T - 1) * H);
      const scale = Math.max(...Array.from(row, Math.abs));
      for (let j = 0; j < H; j++) expect(Math.abs(last.embedding[j]! - row[j]!)).toBeLessThan(2e-2 * scale);
      const mean = await embed({ model: gpu }, ids, { pooling: 'mean', normalize: false });
      for (let j = 0; j < H; j++) {
        let s = 0;
        for (let t = 0; t < T; t++) s += got[t * H + j]!;
        expect(mean.embedding[j]).toBeCloseTo(s / T, 5);
      }
    });
  }
});
