// The oracle fixtures (test/fixtures/models/*, made by scripts/oracle with transformers) carry
// each config in both dialects: one written by transformers >= 5 (rope_parameters, layer_types
// computed by transformers itself) and its transformers 4.x form (rope_theta / rope_scaling,
// sliding_window_pattern, no layer_types). Both must read to the same typed config, so what we
// derive from the old form (layer kinds, local rope, defaults) is checked against transformers'
// own derivation. The weights must agree with the config's shapes.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { inspectCheckpoint, parseConfig, type ModelConfig } from '../lib/artifacts/index.js';
import { packageRoot } from '../lib/native/index.js';

const root = join(packageRoot, 'test', 'fixtures', 'models');
const dirs = existsSync(root) ? readdirSync(root).filter((d) => existsSync(join(root, d, 'config.alt.json'))) : [];

describe('config dialects agree on the oracle fixtures', () => {
  it('finds the fixtures', () => {
    expect(dirs.length).toBeGreaterThanOrEqual(7);
  });

  for (const d of dirs) {
    it(`${d}: config.json and config.alt.json read to the same config`, () => {
      const text = (f: string) => readFileSync(join(root, d, f), 'utf8');
      const raw = JSON.parse(text('config.json')) as Record<string, unknown>;
      const alt = JSON.parse(text('config.alt.json')) as Record<string, unknown>;
      const a = parseConfig(text('config.json'));
      const b = parseConfig(text('config.alt.json'));
      expect(a).toEqual(b);
      // Whichever file transformers >= 5 wrote carries transformers' own layer_types.
      const v5 = Array.isArray(raw.layer_types) ? raw : alt;
      if (Array.isArray(v5.layer_types)) expect(a.layerTypes).toEqual(v5.layer_types);
      expect(a.layerTypes.length).toBe(a.numLayers);
    });

    it(`${d}: tensors match the config's shapes`, async () => {
      const ck = await inspectCheckpoint(join(root, d));
      const c: ModelConfig = ck.config;
      const shape = (n: string) => ck.tensors.find((t) => t.name === n)?.shape;
      expect(shape('model.embed_tokens.weight')).toEqual([c.vocabSize, c.hiddenSize]);
      expect(shape('model.norm.weight')).toEqual([c.hiddenSize]);
      if (!c.tieWordEmbeddings) expect(shape('lm_head.weight')).toEqual([c.vocabSize, c.hiddenSize]);
      const layers = new Set(ck.tensors.map((t) => /^model\.layers\.(\d+)\./.exec(t.name)?.[1]).filter((x) => x !== undefined));
      expect(layers.size).toBe(c.numLayers);
      const o = shape('model.layers.0.self_attn.o_proj.weight');
      expect(o).toEqual([c.hiddenSize, c.numHeads * c.headDim]);
    });
  }
});
