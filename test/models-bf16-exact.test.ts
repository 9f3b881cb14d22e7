// bf16 checkpoints on the float32-exact kernels (MLXB_CPU_MATMUL=exact; this file runs in its own
// forked process and the switch is read at the first matmul): the weights kept as bf16 must give
// the float32 oracle's logits within 1e-4 of each row's max |logit|, as in float32 (L0). On CPUs
// where the bf16 kernels are not the default these are the ones test/models.test.ts runs.
process.env.MLXB_CPU_MATMUL = 'exact';
const { describe, expect, it } = await import('vitest');
const { loadModel } = await import('../lib/models/index.js');
const { forwardSequence } = await import('../lib/scoring/index.js');
const { native } = await import('../lib/native/index.js');
const { f32, fixtureDir, fixtureNames, oracle } = await import('./helpers/model-fixtures.js');
const { worstRowError } = await import('./helpers/logits.js');

const bf16 = fixtureNames().filter((n) => oracle(n).weight_dtype === 'bfloat16');

describe('bf16 weights with float32-exact matmuls (MLXB_CPU_MATMUL=exact)', () => {
  it('the switch is in effect', () => {
    expect(native().cpuFeatures().bf16Matmul).toBe('exact');
    expect(bf16.length).toBeGreaterThanOrEqual(3);
  });
  it.each(bf16)('%s: logits within 1e-4 of the float32 oracle', async (name) => {
    const o = oracle(name);
    await using m = await loadModel(fixtureDir(name), { device: 'cpu', dtype: 'auto' });
    const got = await forwardSequence(m, o.prompt_ids);
    const ref = f32(name, 'logits.f32');
    const { err, row } = worstRowError(got, ref, o.vocab_size);
    expect(err, `row ${row}`).toBeLessThanOrEqual(1e-4);
  });
});
