// Greedy tokens of a model on CUDA, printed as one line, so that two launch settings that must not
// change any value can be compared exactly (the quantized GEMVs compute the same float sums
// whether they are launched programmatically or not, recorded in a decode graph or not):
//   node scripts/cuda/quant-same.mjs MODEL_DIR [tokens]  > a.txt
//   MLXB_QGEMV_PDL=1 node scripts/cuda/quant-same.mjs MODEL_DIR [tokens] > b.txt && cmp a.txt b.txt
// The prompt is fixed pseudo-random ids; random-weight checkpoints have near-tied logits, so a
// token sequence this long diverges at the first step whose logits differ at all.
import { loadModel } from '@mlx-bun/inference/models';
import { greedyTokens } from '@mlx-bun/inference/scoring';

const [dir, count] = process.argv.slice(2);
if (!dir) {
  console.error('usage: node scripts/cuda/quant-same.mjs MODEL_DIR [tokens]');
  process.exit(2);
}
const n = Number(count ?? 200);
const model = await loadModel(dir, { device: 'cuda' });
let seed = 777;
const ids = Array.from({ length: 40 }, () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return 1000 + (seed % Math.max(1, model.config.vocabSize - 2000));
});
const tokens = await greedyTokens(model, ids, n);
console.log(tokens.join(' '));
model.dispose();
