// Batch invariance of the batched decoder forward on the CPU (test/native/batched_forward_test.cc,
// built by `npm run build`): matmul rows independent of M, and forward_paged / forward_rows with
// prefill chunks and decode rows mixed giving every sequence the exact logits (memcmp) it gets
// alone, for every fixture family (dense and MLX-quantized). Run under the widest kernels of this
// CPU and the scalar ones.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';
import { FIXTURE_ROOT, fixtureNames, verifyFixture } from './helpers/model-fixtures.js';

describe('batched forward (native)', () => {
  const bin = join(packageRoot, 'build', 'batched_forward_test');
  for (const level of ['native', 'scalar'] as const) {
    it(`rows are bit-identical to each sequence alone (${level} kernels)`, () => {
      for (const name of fixtureNames()) verifyFixture(name);
      expect(existsSync(bin), `${bin} is built by npm run build`).toBe(true);
      const env = { ...process.env };
      if (level === 'scalar') env.MLXB_CPU = 'scalar';
      else delete env.MLXB_CPU;
      const r = spawnSync(bin, [FIXTURE_ROOT], { encoding: 'utf8', timeout: 120_000, env });
      expect(r.stdout).toContain('ok matmul invariance');
      expect(r.stdout).toContain('ok paged op errors');
      expect(r.stdout).toContain('ok gemma3_text');
      expect(r.stdout).toContain('ok llama_q4');
      expect(r.stdout).toContain('all batched forward checks passed');
      expect(r.status).toBe(0);
    });
  }
});
