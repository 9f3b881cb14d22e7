#!/usr/bin/env node
/**
 * `mlx-bun`: the command-line tool. One line per command below; each command is a module under
 * commands/ exporting `usage` and `run(argv, io)`, built only on the package's public exports.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { processIO, reportError, type Command, type CommandIO } from './common.js';

const COMMANDS: Record<string, { summary: string; load: () => Promise<Command> }> = {
  generate: { summary: 'generate text from a prompt (chat template applied)', load: () => import('./commands/generate.js') },
  chat: { summary: 'interactive chat with history', load: () => import('./commands/chat.js') },
  bench: { summary: 'prefill and decode tokens/s', load: () => import('./commands/bench.js') },
  embed: { summary: 'pooled embeddings of texts, one JSON line each', load: () => import('./commands/embed.js') },
  info: { summary: 'what a checkpoint is: family, parameters, dtype, size', load: () => import('./commands/info.js') },
  quantize: { summary: 'write an MLX affine-quantized checkpoint', load: () => import('./commands/quantize.js') },
  serve: { summary: 'OpenAI-compatible HTTP server with continuous batching', load: () => import('./commands/serve.js') },
};

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  const lines = Object.entries(COMMANDS).map(([k, c]) => `  ${k.padEnd(width)}  ${c.summary}`);
  return `usage: mlx-bun <command> [options]   (mlx-bun <command> --help for its options)\n\ncommands:\n${lines.join('\n')}\n`;
}

export async function main(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.stdout.write(help());
    return name === undefined ? 2 : 0;
  }
  const entry = COMMANDS[name];
  if (!entry) {
    io.stderr.write(`mlx-bun: unknown command '${name}'\n${help()}`);
    return 2;
  }
  try {
    const cmd = await entry.load();
    return await cmd.run(rest, io);
  } catch (e) {
    return reportError(io, e);
  }
}

const invoked = process.argv[1] ? realpathSync(process.argv[1]) : '';
if (invoked === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code; });
}
