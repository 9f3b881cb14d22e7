// Copies the built addon to prebuilds/<platform>-<arch>/ where node-gyp-build looks first, so an
// installed package needs no compiler and no install script (npm 11 blocks those by default).
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const built = join(root, 'build', 'Release', 'mlxb.node');
if (!existsSync(built)) {
  console.error(`prebuild: ${built} does not exist; run npm run build:native first`);
  process.exit(1);
}
const dir = join(root, 'prebuilds', `${process.platform}-${process.arch}`);
mkdirSync(dir, { recursive: true });
copyFileSync(built, join(dir, 'mlxb.napi.node'));
console.log(`prebuild: ${join(dir, 'mlxb.napi.node')}`);
