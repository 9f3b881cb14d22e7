// The mlx-bun CLI, driven in-process through main(argv, io) with captured output: help, info,
// generate, chat, bench on the demo's tiny checkpoint (real Qwen3 tokenizer and template, random
// weights), and one-line errors with exit code 1 for wrong paths and unsupported models.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { main } from '../lib/cli/main.js';
import type { CommandIO } from '../lib/cli/common.js';
import { generate, loadLanguageModel } from '../lib/generation/index.js';
// @ts-expect-error -- plain .mjs script without types
import { makeTinyCheckpoint, TINY_CONFIG } from '../scripts/demo/tiny_checkpoint.mjs';
import { fixtureDir } from './helpers/model-fixtures.js';

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
    for (const c of ['generate', 'chat', 'bench', 'info', 'quantize']) expect(r.out).toContain(c);
    expect((await cli(['frobnicate'])).code).toBe(2);
  });

  it.each(['generate', 'chat', 'bench', 'info', 'quantize'])('%s --help', async (c) => {
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

  it('generate streams text from the tiny model; the same seed gives the same text as the library', async () => {
    const args = ['generate', '-m', tiny, '--seed', '7', '-n', '12', '--temperature', '0.9', 'Hello there'];
    const a = await cli(args);
    const b = await cli(args);
    expect(a.code).toBe(0);
    expect(a.out).toBe(b.out);
    expect(a.err).toMatch(/loaded in/);
    const lm = await loadLanguageModel(tiny);
    try {
      const r = await generate(lm, [{ role: 'user', content: 'Hello there' }], { seed: 7, maxTokens: 12, temperature: 0.9 }).complete();
      expect(a.out).toBe(r.text + '\n');
    } finally {
      lm.dispose();
    }
    const j = await cli(['generate', '-m', tiny, '--seed', '7', '-n', '5', '--json', '--raw', 'x']);
    expect(JSON.parse(j.out).generatedTokens).toBe(5);
  });

  it('chat keeps history and honours /reset', async () => {
    const r = await cli(['chat', '-m', tiny, '--seed', '1', '-n', '6'], 'hello\nhow are you?\n/reset\nbye\n');
    expect(r.code).toBe(0);
    expect(r.out.split('\n').filter((l) => l.length > 0).length).toBeGreaterThanOrEqual(1);
    expect(r.err).toContain('(history cleared)');
  });

  it('bench reports prefill and decode speed', async () => {
    const r = await cli(['bench', '-m', tiny, '-p', '8', '-n', '4', '-r', '1', '--json']);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out) as Record<string, number>;
    expect(j.prefillTokensPerSecond).toBeGreaterThan(0);
    expect(j.decodeTokensPerSecond).toBeGreaterThan(0);
  });

  describe('clean errors: exit 1 and one line', () => {
    const oneLine = (err: string) => err.split('\n').filter((l) => l.startsWith('mlx-bun:'));
    it('wrong paths', async () => {
      for (const c of ['info', 'generate', 'chat', 'bench']) {
        const r = await cli(c === 'info' ? [c, '/no/such/dir'] : c === 'generate' ? [c, '-m', '/no/such/dir', 'hi'] : [c, '-m', '/no/such/dir']);
        expect(r.code, c).toBe(1);
        expect(oneLine(r.err).length, r.err).toBe(1);
        expect(r.err).toMatch(/no such|not/);
      }
    });
    it('unsupported model type', async () => {
      const d = join(tmp, 'weird');
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, 'config.json'), JSON.stringify({ ...TINY_CONFIG, model_type: 'frobnet' }));
      const r = await cli(['generate', '-m', d, '--raw', 'hi']);
      expect(r.code).toBe(1);
      expect(oneLine(r.err).length, r.err).toBe(1);
      expect(r.err).toMatch(/frobnet/);
    });
    it('a checkpoint without tokenizer asked for text', async () => {
      const r = await cli(['generate', '-m', fixtureDir('qwen3'), 'hi']);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(/tokenizer/);
    });
    it('bad flag values name the flag', async () => {
      const r = await cli(['generate', '-m', tiny, '--temperature', 'hot', 'hi']);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(/temperature/);
      const u = await cli(['generate', '-m', tiny, '--bogus']);
      expect(u.code).toBe(2);
      expect(u.err).toMatch(/^mlx-bun generate: Unknown option '--bogus'/);
    });
    it.each([['generate', '--model'], ['chat', '--model'], ['bench', '--model'], ['serve', '--model'], ['quantize', '--model and --out']])(
      '%s without its required flags exits 2 and names them', async (c, flags) => {
        const r = await cli([c]);
        expect(r.code).toBe(2);
        expect(r.err.split('\n')[0]).toBe(`mlx-bun ${c}: ${flags} ${flags.includes(' and ') ? 'are' : 'is'} required`);
        expect(r.err).toContain(`usage: mlx-bun ${c}`);
        expect(r.out).toBe('');
      });
  });
});
