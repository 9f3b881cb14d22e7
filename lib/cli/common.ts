/**
 * Shared pieces of the CLI commands: the IO seam (tests pass buffers), one-line error reporting,
 * a load-progress indicator on stderr, and strict flag parsing helpers. Commands use only the
 * package's public exports.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

import { MlxbError } from '../errors.js';

export interface CommandIO {
  readonly stdout: { write(s: string): unknown };
  readonly stderr: { write(s: string): unknown; isTTY?: boolean };
  readonly stdin?: NodeJS.ReadableStream;
}

export const processIO: CommandIO = { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin };

export interface Command {
  readonly usage: string;
  run(argv: readonly string[], io?: CommandIO): Promise<number>;
}

/** Reports an error as one line (`mlx-bun: message`) and returns exit code 1. */
export function reportError(io: CommandIO, e: unknown): number {
  const msg = e instanceof Error ? e.message : String(e);
  const first = msg.split('\n')[0]!;
  // Errors of ours are expected conditions (bad path, unsupported model): no stack trace.
  io.stderr.write(`mlx-bun: ${first}${e instanceof MlxbError ? '' : ' (unexpected error)'}\n`);
  return 1;
}

/** A progress indicator for model loading: a bar on TTYs, a few plain lines otherwise. */
export function loadProgress(io: CommandIO, label: string): { update(fraction: number, phase: string): void; done(): void } {
  const tty = io.stderr.isTTY === true;
  let lastPct = -1;
  const t0 = performance.now();
  return {
    update(fraction, phase) {
      const pct = Math.max(0, Math.min(100, Math.round(fraction * 100)));
      if (tty) {
        const w = 24;
        const filled = Math.round((pct / 100) * w);
        io.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(w - filled)}] ${String(pct).padStart(3)}% ${phase.padEnd(10)}`);
      } else if (pct >= lastPct + 25 || (pct === 100 && lastPct !== 100)) {
        io.stderr.write(`${label}: ${pct}% (${phase})\n`);
      }
      lastPct = Math.max(lastPct, pct);
    },
    done() {
      const s = ((performance.now() - t0) / 1000).toFixed(2);
      io.stderr.write(tty ? `\r${label}: loaded in ${s} s${' '.repeat(30)}\n` : `${label}: loaded in ${s} s\n`);
    },
  };
}

/** A numeric flag: the raw text becomes a number (NaN when not numeric) so option validation names it. */
export function num(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  return /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(v.trim()) ? Number(v) : NaN;
}

export function formatCount(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}

export function formatBytes(n: number): string {
  if (n >= 2 ** 30) return `${(n / 2 ** 30).toFixed(2)} GiB`;
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (n >= 2 ** 10) return `${(n / 2 ** 10).toFixed(1)} KiB`;
  return `${n} B`;
}

type Parsed<T extends ParseArgsConfig> = ReturnType<typeof parseArgs<T>>;

/**
 * Strict flag parsing shared by the commands: a parse error or a missing required flag prints
 * `mlx-bun <command>: <reason>` and the usage to stderr and gives exit code 2; --help prints the
 * usage to stdout and gives 0. Otherwise returns the parsed flags.
 */
export function parseCommandLine<T extends ParseArgsConfig>(
  command: string, usage: string, io: CommandIO, argv: readonly string[], config: T, required: readonly string[] = [],
): Parsed<T> | number {
  let parsed: Parsed<T>;
  try {
    parsed = parseArgs({ ...config, args: [...argv], strict: true }) as Parsed<T>;
  } catch (e) {
    io.stderr.write(`mlx-bun ${command}: ${(e as Error).message}\n${usage}\n`);
    return 2;
  }
  const values = parsed.values as Record<string, unknown>;
  if (values.help) {
    io.stdout.write(usage + '\n');
    return 0;
  }
  const missing = required.filter((f) => values[f] === undefined);
  if (missing.length > 0) {
    io.stderr.write(`mlx-bun ${command}: ${missing.map((f) => `--${f}`).join(' and ')} ${missing.length > 1 ? 'are' : 'is'} required\n${usage}\n`);
    return 2;
  }
  return parsed;
}
