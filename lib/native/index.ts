/**
 * The only importer of the compiled addon. Finds it (MLXB_NATIVE_PATH, then prebuilds/ or
 * build/Release through node-gyp-build), installs the typed-error factory and hands out the
 * binding typed by types/native.d.ts. All load failures are collected into one actionable error.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { NativeBinding } from '../../types/native.js';
import { errorFromCode, NotBuiltError } from '../errors.js';

const require = createRequire(import.meta.url);

/** Package root: lib/native (sources under vitest) and dist/native (built) are both two levels down. */
export const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

let cached: NativeBinding | undefined;

function load(): NativeBinding {
  const tried: string[] = [];
  const explicit = process.env.MLXB_NATIVE_PATH;
  if (explicit) {
    try {
      return require(explicit) as NativeBinding;
    } catch (e) {
      tried.push(`${explicit}: ${(e as Error).message}`);
    }
  } else {
    try {
      const gypBuild = require('node-gyp-build') as (dir: string) => unknown;
      return gypBuild(packageRoot) as NativeBinding;
    } catch (e) {
      tried.push(`node-gyp-build(${packageRoot}): ${(e as Error).message}`);
    }
    const direct = join(packageRoot, 'build', 'Release', 'mlxb.node');
    try {
      return require(direct) as NativeBinding;
    } catch (e) {
      tried.push(`${direct}: ${(e as Error).message}`);
    }
  }
  throw new NotBuiltError(
    'could not load the @mlx-bun/inference native addon. Build it with `npm run build` ' +
      '(needs cmake and a C++17 compiler) or set MLXB_NATIVE_PATH to a built mlxb.node.\n  ' +
      tried.join('\n  '),
  );
}

/** The addon, loaded on first use. */
export function native(): NativeBinding {
  if (!cached) {
    const b = load();
    b.setErrorFactory((code, message, field) => errorFromCode(code, message, field));
    cached = b;
  }
  return cached;
}
