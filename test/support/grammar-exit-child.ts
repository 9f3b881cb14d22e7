// Child process of test/generation.grammar.test.ts: runs one grammar-constrained generation on
// the checkpoint in argv[2], prints the text, disposes the model and returns. The process must
// then exit on its own: an idle grammar worker must not keep it alive.
import { generate, loadLanguageModel } from '../../lib/generation/index.js';

const lm = await loadLanguageModel(process.argv[2]!, { device: 'cpu' });
const r = await generate(lm, 'x', { grammar: { type: 'ebnf', grammar: 'root ::= "yes" | "no"' }, maxTokens: 5, temperature: 0 }).complete();
process.stdout.write(r.text);
lm.dispose();
