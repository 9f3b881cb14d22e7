/**
 * `mlx-bun quantize --model IN --out OUT [--bits 4] [--group-size 64] [--mixed RECIPE|RULES]
 * [--dtype bfloat16]`: writes an MLX-format affine-quantized checkpoint through the public
 * `quantize` API, with a progress bar on stderr. Ctrl-C aborts and leaves no output directory.
 * --mixed takes an mlx-lm recipe (mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6) or rules
 * "match=bits[:group],..." where bits may be "none" (e.g. "embed_tokens=8,lm_head=8").
 */

import { InvalidArgumentError, MlxbError } from '../../errors.js';
import { parseCommandLine, processIO, type CommandIO } from '../common.js';
import { MIXED_RECIPES, quantizeCheckpoint, type MixedRecipe, type QuantizeProgress, type QuantRule } from '../../quantize/index.js';

export const usage = `usage: mlx-bun quantize --model IN --out OUT [--bits 4] [--group-size 64]
                        [--mixed ${MIXED_RECIPES.join('|')}|MATCH=BITS[:GROUP],...] [--dtype float16|bfloat16|float32]`;

export function parseMixed(text: string): MixedRecipe | QuantRule[] {
  if ((MIXED_RECIPES as readonly string[]).includes(text)) return text as MixedRecipe;
  return text.split(',').map((part) => {
    const m = /^([^=]+)=(none|\d+)(?::(\d+))?$/.exec(part.trim());
    if (!m) throw new InvalidArgumentError(`--mixed: expected a recipe (${MIXED_RECIPES.join(', ')}) or MATCH=BITS[:GROUP], got "${part}"`, 'mixed');
    const bits = m[2] === 'none' ? false : Number(m[2]);
    return m[3] !== undefined ? { match: m[1]!, bits, groupSize: Number(m[3]) } : { match: m[1]!, bits };
  });
}

function intFlag(v: string | undefined, name: string, dflt: number): number {
  if (v === undefined) return dflt;
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError(`--${name} must be an integer, got "${v}"`, name);
  return Number(v);
}

function bar(p: QuantizeProgress): string {
  const frac = p.total > 0 ? p.done / p.total : 1;
  const width = 30;
  const filled = Math.round(frac * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ${p.tensor ?? ''}`;
}

/** Runs the command; returns the process exit code. */
export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('quantize', usage, io, argv, {
    options: {
        model: { type: 'string' }, out: { type: 'string' }, bits: { type: 'string' }, 'group-size': { type: 'string' },
        mixed: { type: 'string' }, dtype: { type: 'string' }, help: { type: 'boolean', short: 'h' },
      },
  }, ['model', 'out']);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const model = values.model!, out = values.out!;
  const controller = new AbortController();
  const onSigint = (): void => controller.abort();
  process.once('SIGINT', onSigint);
  const tty = io.stderr.isTTY === true;
  let lastLine = '';
  try {
    const dtype = values.dtype as 'float32' | 'float16' | 'bfloat16' | undefined;
    const result = await quantizeCheckpoint(model, out, {
      bits: intFlag(values.bits, 'bits', 4),
      groupSize: intFlag(values['group-size'], 'group-size', 64),
      mixed: values.mixed !== undefined ? parseMixed(values.mixed) : undefined,
      dtype,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.phase !== 'quantize') return;
        const line = bar(p);
        if (tty) io.stderr.write(`\r${line.padEnd(lastLine.length)}`);
        lastLine = line;
      },
    });
    if (tty) io.stderr.write('\n');
    io.stdout.write(`wrote ${result.outDir}: ${result.quantizedLayers} quantized layers, ${(result.bytes / 2 ** 20).toFixed(1)} MiB, ${result.bitsPerWeight.toFixed(3)} bits per weight\n`);
    return 0;
  } catch (e) {
    if (tty && lastLine) io.stderr.write('\n');
    if (e instanceof MlxbError) {
      io.stderr.write(`mlx-bun quantize: ${e.message}\n`);
      return e.code === 'ABORTED' ? 130 : 1;
    }
    throw e;
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
