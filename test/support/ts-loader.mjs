// Node module hooks that let a child process run this repository's TypeScript sources directly
// (Node 20 has no type stripping): `./x.js` imports from a .ts file resolve to `./x.ts` when only
// the .ts exists, and .ts files are transpiled (types erased, no type check) by typescript's
// transpileModule. Test-only; registered by ts-register.mjs.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import ts from 'typescript';

export async function resolve(specifier, context, next) {
  if (specifier.endsWith('.js') && context.parentURL?.endsWith('.ts') && (specifier.startsWith('.') || specifier.startsWith('/'))) {
    const asTs = new URL(specifier.slice(0, -3) + '.ts', context.parentURL);
    if (!existsSync(fileURLToPath(new URL(specifier, context.parentURL))) && existsSync(fileURLToPath(asTs)))
      return { url: asTs.href, shortCircuit: true };
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.endsWith('.ts')) return next(url, context);
  const source = readFileSync(fileURLToPath(url), 'utf8');
  const out = ts.transpileModule(source, {
    fileName: fileURLToPath(url),
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false },
  });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
