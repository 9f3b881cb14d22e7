/**
 * How a checkpoint says its embeddings are made, from the sentence-transformers side files:
 * modules.json (the module chain: Transformer, Pooling, Normalize), the pooling module's
 * config.json (`1_Pooling/config.json`) and config_sentence_transformers.json (named prompts).
 * A chain this library cannot run as written (a Dense projection, max or weighted pooling) is an
 * UnsupportedError rather than silently different vectors.
 */
import { join } from 'node:path';

import { InvalidFileError, UnsupportedError } from '../errors.js';
import { assertDirectory, readOptionalJson, readOptionalJsonValue, type JsonObject } from '../input/files.js';
import type { Pooling } from './embed.js';

export interface EmbeddingProfile {
  /** From the pooling module; undefined when the checkpoint has none. */
  pooling?: Pooling;
  /** Whether the chain ends in Normalize; undefined without modules.json. */
  normalize?: boolean;
  /** Named prompts (text put before the input), e.g. { query: 'Instruct: ...\nQuery:' }. */
  prompts: Readonly<Record<string, string>>;
  defaultPromptName?: string;
}

const POOLING_KEYS: ReadonlyArray<[string, Pooling | null]> = [
  ['pooling_mode_lasttoken', 'last'],
  ['pooling_mode_mean_tokens', 'mean'],
  ['pooling_mode_cls_token', 'cls'],
  ['pooling_mode_max_tokens', null],
  ['pooling_mode_mean_sqrt_len_tokens', null],
  ['pooling_mode_weightedmean_tokens', null],
];

function poolingOf(cfg: JsonObject, file: string): Pooling {
  const on = POOLING_KEYS.filter(([k]) => cfg[k] === true);
  if (on.length !== 1) throw new UnsupportedError(`${file}: expected exactly one pooling mode, found ${on.map(([k]) => k).join(', ') || 'none'}`, file);
  const [key, mode] = on[0]!;
  if (mode === null) throw new UnsupportedError(`${file}: ${key} is not supported (last, mean and cls pooling are)`, file);
  return mode;
}

/** Reads the sentence-transformers files of `dir`; every field is optional. */
export async function loadEmbeddingProfile(dir: string): Promise<EmbeddingProfile> {
  await assertDirectory(dir, 'dir');
  const profile: { pooling?: Pooling; normalize?: boolean; prompts: Record<string, string>; defaultPromptName?: string } = { prompts: {} };
  const modules = await readOptionalJsonArray(dir, 'modules.json');
  if (modules !== undefined) {
    profile.normalize = false;
    for (const [i, m] of modules.entries()) {
      const type = typeof m.type === 'string' ? m.type : '';
      const kind = type.split('.').pop() ?? '';
      if (kind === 'Transformer') continue;
      if (kind === 'Normalize') { profile.normalize = true; continue; }
      if (kind === 'Pooling') {
        const path = typeof m.path === 'string' ? m.path : '';
        const file = join(path, 'config.json');
        const cfg = await readOptionalJson(dir, file);
        if (!cfg) throw new InvalidFileError(`modules.json names a pooling module at '${path}' without a config.json`, 'modules.json');
        profile.pooling = poolingOf(cfg, file);
        continue;
      }
      throw new UnsupportedError(`modules.json: module ${i} (${type || 'no type'}) is not supported; embeddings here are Transformer -> Pooling -> Normalize`, 'modules.json');
    }
  }
  const st = await readOptionalJson(dir, 'config_sentence_transformers.json');
  if (st) {
    const prompts = st.prompts;
    if (prompts !== undefined && prompts !== null) {
      if (typeof prompts !== 'object' || Array.isArray(prompts) || !Object.values(prompts).every((v) => typeof v === 'string'))
        throw new InvalidFileError('config_sentence_transformers.json: prompts must map names to strings', 'config_sentence_transformers.json');
      profile.prompts = { ...(prompts as Record<string, string>) };
    }
    if (typeof st.default_prompt_name === 'string') profile.defaultPromptName = st.default_prompt_name;
  }
  return profile;
}

async function readOptionalJsonArray(dir: string, name: string): Promise<JsonObject[] | undefined> {
  const v = await readOptionalJsonValue(dir, name);
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((m) => typeof m === 'object' && m !== null && !Array.isArray(m)))
    throw new InvalidFileError(`${join(dir, name)}: expected an array of module objects`, name);
  return v as JsonObject[];
}
