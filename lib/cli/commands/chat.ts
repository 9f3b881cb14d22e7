/**
 * `mlx-bun chat -m DIR`: an interactive chat through the checkpoint's template, keeping the
 * conversation history. Lines from stdin are user turns (works piped too); `/reset` clears the
 * history, `/exit` or end of input quits; Ctrl-C stops the reply being generated.
 */
import { createInterface } from 'node:readline';

import { InvalidArgumentError } from '../../errors.js';
import type { ChatMessage } from '../../input/index.js';
import { processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';
import { generateOptions, loadModel, MODEL_FLAGS, MODEL_HELP, SAMPLING_FLAGS, SAMPLING_HELP } from './options.js';

export const usage = `usage: mlx-bun chat -m <checkpoint-dir> [options]

Chats with a model: each input line is a user message; the reply streams back. The history is
kept and re-rendered through the chat template every turn. Commands: /reset, /exit.

${MODEL_HELP}
${SAMPLING_HELP}`;

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('chat', usage, io, argv, { options: { ...MODEL_FLAGS, ...SAMPLING_FLAGS, help: { type: 'boolean', short: 'h' } } }, ['model']);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const model = values.model!;
  let current: AbortController | undefined;
  const onSigint = () => {
    if (current) current.abort();
    else process.exit(130);
  };
  process.on('SIGINT', onSigint);
  try {
    const options = generateOptions(values);
    const lm = await loadModel(io, model, values);
    try {
      if (!lm.chatTemplate) throw new InvalidArgumentError(`${model} has no chat template; use mlx-bun generate --raw`, 'model');
      const system: ChatMessage[] = values.system ? [{ role: 'system', content: values.system }] : [];
      let history: ChatMessage[] = [...system];
      const interactive = io.stderr.isTTY === true;
      const rl = createInterface({ input: io.stdin ?? process.stdin, terminal: false });
      const ask = () => { if (interactive) io.stderr.write('> '); };
      ask();
      for await (const raw of rl) {
        const line = raw.trim();
        if (line === '/exit' || line === '/quit') break;
        if (line === '/reset') {
          history = [...system];
          io.stderr.write('(history cleared)\n');
          ask();
          continue;
        }
        if (line.length === 0) { ask(); continue; }
        history.push({ role: 'user', content: line });
        current = new AbortController();
        const g = lm.generate(history, { ...options, signal: current.signal });
        for await (const e of g) io.stdout.write(e.text);
        const r = await g.complete();
        current = undefined;
        io.stdout.write('\n');
        if (r.finishReason === 'abort') io.stderr.write('(stopped)\n');
        history.push({ role: 'assistant', content: r.text });
        ask();
      }
      rl.close();
    } finally {
      lm.dispose();
    }
    return 0;
  } catch (e) {
    return reportError(io, e);
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
