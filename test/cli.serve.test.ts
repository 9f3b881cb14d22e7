// `mlx-bun serve` as a real child process on the demo checkpoint (random-weight Qwen3 shape with
// the real Qwen3 tokenizer and chat template): serves the openai client, refuses a public bind
// without a key, and drains on SIGTERM (a request in flight completes, then exit 0).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';
// @ts-expect-error plain .mjs helper without types
import { makeTinyCheckpoint } from '../scripts/demo/tiny_checkpoint.mjs';

let tmp: string;
let tiny: string;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'mlxb-serve-'));
  tiny = makeTinyCheckpoint(join(tmp, 'tiny')) as string;
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function serve(args: string[]) {
  const child = spawn(process.execPath, ['--import', join(packageRoot, 'test', 'support', 'ts-register.mjs'), join(packageRoot, 'lib', 'cli', 'main.ts'), 'serve', ...args], {
    cwd: packageRoot, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const url = new Promise<string>((resolve, reject) => {
    const check = () => {
      const m = /serving '.*' at (http:\/\/[^ ]+)\/v1/.exec(err);
      if (m) resolve(m[1]!);
    };
    child.stderr.on('data', check);
    void exited.then((code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  url.catch(() => {});  // tests that expect an exit never await the URL
  return { child, url, exited, stderr: () => err };
}

describe('mlx-bun serve', () => {
  it('serves chat completions and drains on SIGTERM', async () => {
    const s = serve(['-m', tiny, '--port', '0', '--model-id', 'demo', '--max-rows', '4']);
    const url = await s.url;
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
    expect((await client.models.list()).data[0]!.id).toBe('demo');
    const r = await client.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'Hi!' }], max_tokens: 8, seed: 1 });
    expect(r.usage!.completion_tokens).toBeGreaterThan(0);
    // A streaming request is in flight when SIGTERM arrives: it still completes.
    const stream = await client.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'Count.' }], max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    s.child.kill('SIGTERM');
    let usage;
    for (;;) {
      const n = await it.next();
      if (n.done) break;
      if (n.value.usage) usage = n.value.usage;
    }
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    expect(await s.exited).toBe(0);
    expect(s.stderr()).toContain('SIGTERM: draining');
  });

  it('refuses a non-loopback bind without --api-key', async () => {
    const s = serve(['-m', tiny, '--host', '0.0.0.0', '--port', '0']);
    expect(await s.exited).toBe(1);
    expect(s.stderr()).toMatch(/apiKey is required/);
  });
});
