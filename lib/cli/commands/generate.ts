/**
 * `mlx-bun generate -m DIR [PROMPT]`: loads a checkpoint and streams a continuation to stdout.
 * The prompt goes through the chat template as a user message when the checkpoint has one
 * (--raw sends it as is). Ctrl-C stops generation cleanly. --stats prints timing to stderr.
 */

import { InvalidArgumentError } from '../../errors.js';
import { speculativeGenerate, type GenerationInput, type SpeculativeStats } from '../../generation/index.js';
import type { ChatMessage } from '../../input/index.js';
import { num, processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';
import { generateOptions, loadModel, MODEL_FLAGS, MODEL_HELP, SAMPLING_FLAGS, SAMPLING_HELP } from './options.js';

export const usage = `usage: mlx-bun generate -m <checkpoint-dir> [options] [prompt]

Generates text from a prompt (also read from --prompt, or stdin when neither is given).

${MODEL_HELP}
${SAMPLING_HELP}
speculative:
      --draft DIR               a small model of the same vocabulary proposes tokens; the model keeps
                                those its own distribution allows (same output distribution, greedy:
                                the same tokens), fewer of its forwards when the draft guesses well
      --draft-tokens N          proposals per forward (default 4)
output:
  -p, --prompt TEXT             the prompt
      --raw                     do not apply the chat template
      --stats                   print token counts and speed to stderr
      --json                    print the result (text, tokens, stats) as JSON instead of streaming`;

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  let s = '';
  for await (const chunk of stream) s += typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8');
  return s;
}

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('generate', usage, io, argv, {
    options: {
      ...MODEL_FLAGS, ...SAMPLING_FLAGS, prompt: { type: 'string', short: 'p' }, raw: { type: 'boolean' }, stats: { type: 'boolean' },
      json: { type: 'boolean' }, draft: { type: 'string' }, 'draft-tokens': { type: 'string' }, help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
  }, ['model']);
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  const model = values.model!;
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once('SIGINT', onSigint);
  try {
    const options = { ...generateOptions(values), signal: ac.signal };
    let prompt = values.prompt ?? (positionals.length > 0 ? positionals.join(' ') : undefined);
    if (prompt === undefined) prompt = io.stdin ? (await readAll(io.stdin)).replace(/\n$/, '') : '';
    if (values['draft-tokens'] !== undefined && values.draft === undefined)
      throw new InvalidArgumentError('--draft-tokens needs --draft', 'draft-tokens');
    const lm = await loadModel(io, model, values);
    const draft = values.draft !== undefined ? await loadModel(io, values.draft, values).catch((e: unknown) => { lm.dispose(); throw e; }) : undefined;
    try {
      let input: GenerationInput = prompt;
      if (!values.raw && lm.chatTemplate) {
        const messages: ChatMessage[] = [];
        if (values.system) messages.push({ role: 'system', content: values.system });
        messages.push({ role: 'user', content: prompt });
        input = messages;
      }
      const g = draft ? speculativeGenerate(lm, draft, input, { ...options, draftTokens: num(values['draft-tokens']) }) : lm.generate(input, options);
      if (!values.json) {
        for await (const e of g) io.stdout.write(e.text);
        io.stdout.write('\n');
      }
      const r = await g.complete();
      if (values.json) io.stdout.write(JSON.stringify(r, null, 2) + '\n');
      if (values.stats) {
        io.stderr.write(
          `prompt ${r.promptTokens} tokens, ${r.prefillTokensPerSecond.toFixed(1)} tok/s (first token ${r.timeToFirstTokenMs.toFixed(0)} ms); ` +
          `generated ${r.generatedTokens} tokens, ${r.decodeTokensPerSecond.toFixed(1)} tok/s; finish: ${r.finishReason}\n`,
        );
        const sp = (r as { speculative?: SpeculativeStats }).speculative;
        if (sp) io.stderr.write(`draft: ${sp.accepted} of ${sp.drafted} proposals kept, ${sp.rounds} target forwards\n`);
      }
    } finally {
      lm.dispose();
      draft?.dispose();
    }
    return 0;
  } catch (e) {
    return reportError(io, e);
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
