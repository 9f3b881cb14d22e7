// Bun smoke test: the built package (dist/) and its Node-API addon load and work under Bun.
// Run by test/bun.test.ts with the `bun` binary from devDependencies; prints one JSON line.
import { native } from '../../dist/native/index.js';

const info = native().buildInfo();
const out = { runtime: typeof Bun !== 'undefined' ? `bun ${Bun.version}` : 'node', threads: info.threads, cudaBuilt: info.cudaBuilt };
console.log(JSON.stringify(out));
