// What a grammar costs per token, through the public API: decode tokens/s of generate() without
// and with a grammar that never ends on its own (so both runs make --gen tokens), alternating.
// The checkpoint needs a tokenizer (for a random-weight one, copy a real tokenizer.json and
// tokenizer_config.json of the same vocabulary into it).
//
// node scripts/bench/grammar.mjs --model DIR [--gen 64] [--rounds 2] [--device cpu|cuda]
import { parseArgs } from 'node:util';

import { generate, loadLanguageModel } from '@mlx-bun/inference/generation';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    gen: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '2' },
    device: { type: 'string', default: 'cpu' },
  },
});
if (!values.model) {
  console.error('usage: node scripts/bench/grammar.mjs --model DIR [--gen 64] [--rounds 2] [--device cpu|cuda]');
  process.exit(2);
}
const lm = await loadLanguageModel(values.model, { device: values.device });
const gen = Number(values.gen);
const opts = { maxTokens: gen, temperature: 1, seed: 1, stopTokenIds: [...lm.eosTokenIds] };
const grammar = { type: 'ebnf', grammar: 'root ::= [a-z ,.]+ ' };
const t0 = performance.now();
await generate(lm, 'warm-up', { ...opts, maxTokens: 2, grammar }).complete();
console.log(`first grammar for this tokenizer: ${(performance.now() - t0).toFixed(0)} ms (vocabulary indexed, grammar compiled)`);
for (let round = 1; round <= Number(values.rounds); round++) {
  const a = await generate(lm, 'Once upon a time', opts).complete();
  const b = await generate(lm, 'Once upon a time', { ...opts, grammar }).complete();
  const ms = (r) => 1000 / r.decodeTokensPerSecond;
  console.log(
    `round ${round}: plain ${a.decodeTokensPerSecond.toFixed(2)} tok/s (${a.generatedTokens} tokens), ` +
    `grammar ${b.decodeTokensPerSecond.toFixed(2)} tok/s (${b.generatedTokens} tokens, ${b.finishReason}); ` +
    `+${(ms(b) - ms(a)).toFixed(1)} ms per token`,
  );
}
lm.dispose();
