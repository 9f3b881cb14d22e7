// `npm run demo`: the README's main job. Assembles the tiny checkpoint (random-weight Qwen3
// architecture + the real Qwen3 tokenizer and chat template, see tiny_checkpoint.mjs), shows what
// it is with `mlx-bun info`, then chats with it through `mlx-bun generate`: chat template ->
// tokenizer -> model -> sampler -> streaming detokenizer. The words are gibberish (random
// weights); every stage is real. Needs `npm run build` first.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { makeTinyCheckpoint } from './tiny_checkpoint.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cli = join(root, 'dist', 'cli', 'main.js');
if (!existsSync(cli)) {
  console.error('demo: dist/cli/main.js is missing; run `npm run build` first');
  process.exit(1);
}
const dir = makeTinyCheckpoint();
const run = (args) => {
  console.log(`\n$ mlx-bun ${args.map((a) => (/\s/.test(a) ? JSON.stringify(a) : a)).join(' ')}`);
  const r = spawnSync(process.execPath, [cli, ...args], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
run(['info', dir]);
run(['generate', '-m', dir, '--seed', '42', '--max-tokens', '48', '--stats', 'Write a haiku about the sea.']);
