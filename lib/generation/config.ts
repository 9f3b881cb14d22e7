/**
 * generation_config.json: the checkpoint's stop tokens and, when it asks for sampling
 * (`do_sample: true`), its default temperature / top-k / top-p / min-p / repetition penalty.
 * Without `do_sample: true` the defaults are greedy, as transformers does.
 */
import type { SamplingOptions } from '../sampling/options.js';
import { readOptionalJson, type JsonObject } from '../input/files.js';

export interface GenerationConfig {
  /** Token ids that end generation (eos_token_id, a number or a list). */
  eosTokenIds: number[];
  /** Sampling defaults the checkpoint recommends. */
  sampling: SamplingOptions;
  /** max_new_tokens when present. */
  maxNewTokens?: number;
}

function ids(v: unknown): number[] {
  const list = Array.isArray(v) ? v : [v];
  return list.filter((x): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0);
}

function num(o: JsonObject, key: string): number | undefined {
  const v = o[key];
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

export function parseGenerationConfig(o: JsonObject): GenerationConfig {
  const sampling: SamplingOptions = {};
  if (o.do_sample === true) {
    sampling.temperature = num(o, 'temperature') ?? 1;
    const topK = num(o, 'top_k');
    if (topK !== undefined && Number.isInteger(topK) && topK >= 0) sampling.topK = topK;
    const topP = num(o, 'top_p');
    if (topP !== undefined && topP > 0 && topP <= 1) sampling.topP = topP;
    const minP = num(o, 'min_p');
    if (minP !== undefined && minP >= 0 && minP <= 1) sampling.minP = minP;
  } else {
    sampling.temperature = 0;
  }
  const rp = num(o, 'repetition_penalty');
  if (rp !== undefined && rp > 0 && rp <= 100 && rp !== 1) sampling.repetitionPenalty = rp;
  const out: GenerationConfig = { eosTokenIds: ids(o.eos_token_id), sampling };
  const mnt = num(o, 'max_new_tokens');
  if (mnt !== undefined && Number.isInteger(mnt) && mnt > 0) out.maxNewTokens = mnt;
  return out;
}

/** Reads `dir`/generation_config.json; greedy defaults and no stop ids when it is absent. */
export async function loadGenerationConfig(dir: string): Promise<GenerationConfig> {
  const o = await readOptionalJson(dir, 'generation_config.json');
  return o ? parseGenerationConfig(o) : { eosTokenIds: [], sampling: { temperature: 0 } };
}
