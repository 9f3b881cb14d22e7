// The CPU's decode layout of 4-bit weights (QuantWeight::tile, backend/cpu/qweight_layout.cc): a
// checkpoint whose projections, fused q/k/v and gate/up and tied embedding all fit the 8-row tiles
// (hidden 128, K % 128 == 0), quantized by our own tool, gives bit-identical logits and greedy tokens
// loaded tiled (the default) and row-major (MLXB_CPU_WEIGHT_LAYOUT=rows, read at load time).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';
import { quantizeCheckpoint } from '../lib/quantize/index.js';
// @ts-expect-error -- plain .mjs script without types
import { TINY_CONFIG, writeWeights } from '../scripts/demo/tiny_checkpoint.mjs';

const work = mkdtempSync(join(tmpdir(), 'mlxb-tiled-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('4-bit weights in the CPU tile layout', () => {
  it('match the row-major layout bit for bit (prefill logits, then greedy decoding)', async () => {
    const config = {
      ...TINY_CONFIG, hidden_size: 128, intermediate_size: 384, vocab_size: 1000, num_attention_heads: 4,
      num_key_value_heads: 2, head_dim: 32, tie_word_embeddings: true, bos_token_id: 1, eos_token_id: 2,
    };
    const src = join(work, 'bf16');
    mkdirSync(src);
    writeWeights(join(src, 'model.safetensors'), config, 7);
    writeFileSync(join(src, 'config.json'), JSON.stringify(config));
    const q4 = join(work, 'q4');
    await quantizeCheckpoint(src, q4, { bits: 4, groupSize: 64 });
    const ids = Int32Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 1000);
    const run = async (layout: string | undefined) => {
      if (layout) process.env.MLXB_CPU_WEIGHT_LAYOUT = layout;
      else delete process.env.MLXB_CPU_WEIGHT_LAYOUT;
      const model = await native().loadModel(q4, { device: 'cpu', dtype: 'auto' });
      delete process.env.MLXB_CPU_WEIGHT_LAYOUT;
      try {
        expect(model.config().quantized).toBe(true);
        return { logits: await model.forward(ids, true), tokens: Array.from(await model.greedy(ids, 24)) };
      } finally {
        model.dispose();
      }
    };
    const rows = await run('rows');
    const tiled = await run(undefined);
    expect(tiled.logits.length).toBe(ids.length * 1000);
    expect(Buffer.from(tiled.logits.buffer).equals(Buffer.from(rows.logits.buffer))).toBe(true);
    expect(tiled.tokens).toEqual(rows.tokens);
    expect(new Set(tiled.tokens).size).toBeGreaterThan(1);  // not a degenerate repetition
  });
});
