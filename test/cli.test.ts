// The mlx-bun CLI, driven in-process through main(argv, io) with captured output: help, info on
// the demo's tiny checkpoint, and one-line errors with exit code 1 for wrong paths.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { main } from '../lib/cli/main.js';
import type { CommandIO } from '../lib/cli/common.js';
// @ts-expect-error -- plain .mjs script without types
import { makeTinyCheckpoint, TINY_CONFIG } from '../scripts/demo/tiny_checkpoint.mjs';

interface Captured extends CommandIO { out: () => string; err: () => string }

function capture(stdinText?: string): Captured {
  let out = '';
  let err = '';
  return {
    stdout: { write: (s: string) => { out += s; return true; } },
    stderr: { write: (s: string) => { err += s; return true; }, isTTY: false },
    stdin: Readable.from(stdinText === undefined ? [] : [stdinText]),
    out: () => out,
    err: () => err,
  };
}

async function cli(argv: string[], stdinText?: string) {
  const io = capture(stdinText);
  const code = await main(argv, io);
  return { code, out: io.out(), err: io.err() };
}

const COMMANDS = ['info', 'quantize'];
let tmp: string;
let tiny: string;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'mlxb-cli-'));
  tiny = makeTinyCheckpoint(join(tmp, 'tiny')) as string;
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('mlx-bun', () => {
  it('lists its commands; unknown commands exit 2', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const c of COMMANDS) expect(r.out).toContain(c);
    expect((await cli(['frobnicate'])).code).toBe(2);
  });

  it.each(COMMANDS)('%s --help', async (c) => {
    const r = await cli([c, '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(new RegExp(`usage: mlx-bun ${c}`));
  });

  it('info describes the checkpoint', async () => {
    const r = await cli(['info', tiny, '--json']);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out) as Record<string, unknown>;
    const c = TINY_CONFIG as Record<string, number>;
    const h = c.hidden_size!, q = c.num_attention_heads! * c.head_dim!, kv = c.num_key_value_heads! * c.head_dim!, f = c.intermediate_size!;
    const perLayer = 2 * h + q * h + 2 * kv * h + h * q + 2 * c.head_dim! + 3 * f * h;
    expect(j).toMatchObject({ family: 'qwen3', dtype: 'BF16', layers: 2, vocabSize: 151936, chatTemplate: true });
    expect(j.parameters).toBe(2 * c.vocab_size! * h + h + c.num_hidden_layers! * perLayer);
    expect(j.bytes).toBe((j.parameters as number) * 2);
    const text = await cli(['info', tiny]);
    expect(text.out).toMatch(/family\s+qwen3/);
  });

  it('wrong paths: exit 1 and one line', async () => {
    const r = await cli(['info', '/no/such/dir']);
    expect(r.code).toBe(1);
    expect(r.err.split('\n').filter((l) => l.length > 0)).toHaveLength(1);
    expect(r.err).toMatch(/^mlx-bun: /);
  });
});
