/**
 * `mlx-bun bench -m DIR`: prefill and decode speed through the public generate() API: a prompt
 * of P seeded random token ids, then N greedy tokens with no stop token, R times; prints the
 * median prefill tokens/s, decode tokens/s and time to first token.
 */

import { InvalidArgumentError } from '../../errors.js';
import { num, processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';
import { loadModel, MODEL_FLAGS, MODEL_HELP } from './options.js';

export const usage = `usage: mlx-bun bench -m <checkpoint-dir> [options]

${MODEL_HELP}
bench:
  -p, --prompt-tokens N         prompt length (default 128)
  -n, --gen-tokens N            tokens to generate (default 64)
  -r, --repeats N               runs; the median is reported (default 3)
      --json                    print the figures as JSON`;

function intFlag(v: string | undefined, name: string, dflt: number, max: number): number {
  const n = num(v) ?? dflt;
  if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`--${name} must be an integer in [1, ${max}], got "${v}"`, name);
  return n;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('bench', usage, io, argv, {
    options: { ...MODEL_FLAGS, 'prompt-tokens': { type: 'string', short: 'p' }, 'gen-tokens': { type: 'string', short: 'n' }, repeats: { type: 'string', short: 'r' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  }, ['model']);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const model = values.model!;
  try {
    const p = intFlag(values['prompt-tokens'], 'prompt-tokens', 128, 1 << 20);
    const n = intFlag(values['gen-tokens'], 'gen-tokens', 64, 1 << 20);
    const repeats = intFlag(values.repeats, 'repeats', 3, 1000);
    const lm = await loadModel(io, model, values);
    try {
      let s = 12345;
      const prompt = Array.from({ length: p }, () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s % lm.vocabSize; });
      // One short warm-up run (first-touch of weights, thread pool start).
      await lm.generate(prompt.slice(0, Math.min(8, p)), { maxTokens: 2, temperature: 0, stopTokenIds: [] }).complete();
      const prefill: number[] = [], decode: number[] = [], ttft: number[] = [];
      for (let i = 0; i < repeats; i++) {
        const r = await lm.generate(prompt, { maxTokens: n, temperature: 0, stopTokenIds: [] }).complete();
        prefill.push(r.prefillTokensPerSecond);
        decode.push(r.decodeTokensPerSecond);
        ttft.push(r.timeToFirstTokenMs);
      }
      const out = {
        model, device: lm.model.device, promptTokens: p, generatedTokens: n, repeats,
        prefillTokensPerSecond: median(prefill), decodeTokensPerSecond: median(decode), timeToFirstTokenMs: median(ttft),
      };
      if (values.json) {
        io.stdout.write(JSON.stringify(out, null, 2) + '\n');
      } else {
        io.stdout.write(
          `${model} (${lm.model.device}), median of ${repeats}\n` +
          `prefill  ${p} tokens   ${out.prefillTokensPerSecond.toFixed(1)} tok/s   (first token ${out.timeToFirstTokenMs.toFixed(1)} ms)\n` +
          `decode   ${n} tokens   ${out.decodeTokensPerSecond.toFixed(1)} tok/s\n`,
        );
      }
    } finally {
      lm.dispose();
    }
    return 0;
  } catch (e) {
    return reportError(io, e);
  }
}
