/**
 * `mlx-bun info DIR [--json]`: what a checkpoint is (family, parameters, dtype, size, shape of the
 * network, quantization, tokenizer and chat template), read from its files without loading weights.
 */

import { inspectCheckpoint } from '../../artifacts/index.js';
import { ChatTemplate } from '../../input/index.js';
import { formatBytes, formatCount, processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';

export const usage = `usage: mlx-bun info <checkpoint-dir> [--json]

Prints the model family, parameter count, dtype, size on disk and architecture of a Hugging Face
or MLX checkpoint directory, without loading its weights.`;

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('info', usage, io, argv, { options: { json: { type: 'boolean' }, model: { type: 'string', short: 'm' }, help: { type: 'boolean', short: 'h' } }, allowPositionals: true });
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  const dir = values.model ?? positionals[0];
  if (!dir || positionals.length > (values.model ? 0 : 1)) {
    io.stderr.write(`${usage}\n`);
    return 2;
  }
  try {
    const info = await inspectCheckpoint(dir);
    const template = await ChatTemplate.load(dir).catch(() => undefined);
    const c = info.config;
    const summary = {
      family: c.modelType,
      parameters: info.parameterCount,
      dtype: info.dtype,
      bytes: info.totalBytes,
      layers: c.numLayers,
      hiddenSize: c.hiddenSize,
      heads: c.numHeads,
      kvHeads: c.numKvHeads,
      vocabSize: c.vocabSize,
      contextLength: c.maxPositionEmbeddings,
      quantization: c.quantization ?? null,
      shards: info.shards.length,
      chatTemplate: template !== undefined,
    };
    if (values.json) {
      io.stdout.write(JSON.stringify(summary, null, 2) + '\n');
      return 0;
    }
    const q = c.quantization ? `${c.quantization.bits}-bit affine, group ${c.quantization.groupSize}` : 'none';
    const rows: Array<[string, string]> = [
      ['family', c.modelType],
      ['parameters', `${formatCount(info.parameterCount)} (${info.parameterCount})`],
      ['dtype', info.dtype ?? 'unknown'],
      ['size', `${formatBytes(info.totalBytes)} in ${info.shards.length} file${info.shards.length === 1 ? '' : 's'}`],
      ['layers', String(c.numLayers)],
      ['hidden size', String(c.hiddenSize)],
      ['attention heads', `${c.numHeads} (${c.numKvHeads} kv)`],
      ['vocabulary', String(c.vocabSize)],
      ['context', String(c.maxPositionEmbeddings)],
      ['quantization', q],
      ['chat template', template ? 'yes' : 'no'],
    ];
    const w = Math.max(...rows.map(([k]) => k.length));
    io.stdout.write(rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n') + '\n');
    return 0;
  } catch (e) {
    return reportError(io, e);
  }
}
