/**
 * `mlx-bun embed -m DIR TEXT...`: one pooled embedding per text as a JSON line on stdout (the
 * public `embeddings` API). Pooling, normalisation and named prompts default to what the
 * checkpoint's sentence-transformers files say; flags override them.
 */
import { resolve } from 'node:path';

import { embedMany, loadEmbeddingProfile, POOLINGS, withInstruction, type EmbedOptions, type Pooling } from '../../embeddings/index.js';
import { InvalidArgumentError } from '../../errors.js';
import { num, processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';
import { loadModel, MODEL_FLAGS, MODEL_HELP } from './options.js';

export const usage = `usage: mlx-bun embed -m <checkpoint-dir> [options] TEXT...

Prints one JSON line per TEXT: {"index", "tokens", "embedding"}.

${MODEL_HELP}
embedding:
      --pooling last|mean|cls   (default: the checkpoint's 1_Pooling/config.json, else last)
      --no-normalize            keep the raw length (default: the checkpoint's, else normalize)
      --dimensions N            keep the first N components
      --prompt TEXT             put TEXT before every input
      --prompt-name NAME        a prompt named in config_sentence_transformers.json
      --instruction TEXT        the "Instruct: TEXT\\nQuery:" form of instruction-aware models`;

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('embed', usage, io, argv, {
    options: {
      ...MODEL_FLAGS, pooling: { type: 'string' }, 'no-normalize': { type: 'boolean' }, dimensions: { type: 'string' },
      prompt: { type: 'string' }, 'prompt-name': { type: 'string' }, instruction: { type: 'string' }, help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
  }, ['model']);
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  if (positionals.length === 0) {
    io.stderr.write(`mlx-bun embed: give at least one TEXT\n${usage}\n`);
    return 2;
  }
  try {
    if (values.pooling !== undefined && !POOLINGS.includes(values.pooling as Pooling))
      throw new InvalidArgumentError(`pooling must be one of ${POOLINGS.join(', ')}; got ${values.pooling}`, 'pooling');
    const dir = resolve(values.model!);
    const profile = await loadEmbeddingProfile(dir);
    const given = [values.prompt, values['prompt-name'], values.instruction].filter((v) => v !== undefined).length;
    if (given > 1) throw new InvalidArgumentError('give at most one of --prompt, --prompt-name and --instruction', 'prompt');
    let prompt = values.prompt;
    const name = values['prompt-name'] ?? (given === 0 ? profile.defaultPromptName : undefined);
    if (name !== undefined) {
      prompt = profile.prompts[name];
      if (prompt === undefined) {
        const known = Object.keys(profile.prompts);
        throw new InvalidArgumentError(`no prompt named '${name}' in config_sentence_transformers.json${known.length ? ` (it has: ${known.join(', ')})` : ''}`, 'prompt-name');
      }
    }
    const options: EmbedOptions = { pooling: (values.pooling as Pooling | undefined) ?? profile.pooling ?? 'last' };
    if (values['no-normalize']) options.normalize = false;
    else if (profile.normalize !== undefined) options.normalize = profile.normalize;
    if (values.dimensions !== undefined) options.dimensions = num(values.dimensions);
    const texts = values.instruction !== undefined ? positionals.map((t) => withInstruction(values.instruction!, t)) : positionals;
    if (prompt !== undefined) options.prompt = prompt;
    const lm = await loadModel(io, dir, values);
    try {
      const out = await embedMany(lm, texts, options);
      out.forEach((e, index) => io.stdout.write(JSON.stringify({ index, tokens: e.tokens, embedding: Array.from(e.embedding) }) + '\n'));
    } finally {
      lm.dispose();
    }
    return 0;
  } catch (e) {
    return reportError(io, e);
  }
}
