// Speculative generation against plain generate(), through the public API: greedy decoding of
// the same token-id prompt, alternating plain / speculative per round. Prints decode tokens/s of
// each, the draft's kept proposals, and whether the tokens are identical (they must be: greedy).
//
// node scripts/bench/speculative.mjs --target DIR --draft DIR [--prompt 64] [--gen 64]
//        [--draft-tokens 4] [--rounds 2] [--device cpu|cuda]
import { parseArgs } from 'node:util';

import { generate, loadLanguageModel, speculativeGenerate } from '@mlx-bun/inference/generation';

const { values } = parseArgs({
  options: {
    target: { type: 'string' },
    draft: { type: 'string' },
    prompt: { type: 'string', default: '64' },
    gen: { type: 'string', default: '64' },
    'draft-tokens': { type: 'string', default: '4' },
    rounds: { type: 'string', default: '2' },
    device: { type: 'string', default: 'cpu' },
  },
});
if (!values.target || !values.draft) {
  console.error('usage: node scripts/bench/speculative.mjs --target DIR --draft DIR [--prompt 64] [--gen 64] [--draft-tokens 4] [--rounds 2] [--device cpu|cuda]');
  process.exit(2);
}
const device = values.device;
const target = await loadLanguageModel(values.target, { device });
const draft = await loadLanguageModel(values.draft, { device });
const n = Number(values.prompt), gen = Number(values.gen), k = Number(values['draft-tokens']);
const prompt = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % Math.min(target.vocabSize, 32000));
const opts = { maxTokens: gen, temperature: 0, stopTokenIds: [] };

for (let round = 1; round <= Number(values.rounds); round++) {
  const a = await generate(target, prompt, opts).complete();
  const b = await speculativeGenerate(target, draft, prompt, { ...opts, draftTokens: k }).complete();
  const s = b.speculative;
  const same = a.tokens.length === b.tokens.length && a.tokens.every((t, i) => t === b.tokens[i]);
  console.log(
    `round ${round}: plain ${a.decodeTokensPerSecond.toFixed(2)} tok/s, speculative ${b.decodeTokensPerSecond.toFixed(2)} tok/s ` +
    `(x${(b.decodeTokensPerSecond / a.decodeTokensPerSecond).toFixed(2)}); kept ${s.accepted}/${s.drafted} proposals ` +
    `(${((100 * s.accepted) / Math.max(1, s.drafted)).toFixed(0)}%), ${s.rounds} target forwards for ${b.generatedTokens} tokens; ` +
    `tokens ${same ? 'identical' : 'DIFFERENT'}`,
  );
  if (!same) process.exitCode = 1;
}
target.dispose();
draft.dispose();
