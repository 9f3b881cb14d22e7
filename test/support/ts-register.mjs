// `node --import ./test/support/ts-register.mjs child.ts`: run TypeScript sources in a child
// process (see ts-loader.mjs).
import { register } from 'node:module';

register('./ts-loader.mjs', import.meta.url);
