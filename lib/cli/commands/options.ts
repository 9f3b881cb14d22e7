/**
 * Flags shared by the commands that load a model (generate, chat, bench, serve): model loading
 * (with its progress on stderr) and sampling.
 * Numbers go through unchanged (NaN when not numeric) so the library's validation names the bad flag.
 */
import { loadLanguageModel, type GenerateOptions, type LanguageModel, type LoadLanguageModelOptions } from '../../generation/index.js';
import { InvalidArgumentError } from '../../errors.js';
import { loadProgress, num, type CommandIO } from '../common.js';

export const MODEL_FLAGS = {
  model: { type: 'string', short: 'm' },
  device: { type: 'string' },
  dtype: { type: 'string' },
} as const;

export const SAMPLING_FLAGS = {
  'max-tokens': { type: 'string', short: 'n' },
  temperature: { type: 'string', short: 't' },
  'top-k': { type: 'string' },
  'top-p': { type: 'string' },
  'min-p': { type: 'string' },
  'repetition-penalty': { type: 'string' },
  'repetition-context-size': { type: 'string' },
  'presence-penalty': { type: 'string' },
  'frequency-penalty': { type: 'string' },
  seed: { type: 'string' },
  stop: { type: 'string', multiple: true },
  system: { type: 'string' },
  'no-thinking': { type: 'boolean' },
} as const;

export const SAMPLING_HELP = `sampling:
  -n, --max-tokens N            most tokens to generate (default 256)
  -t, --temperature T           0 = greedy (default: generation_config.json, else greedy)
      --top-k K  --top-p P  --min-p P
      --repetition-penalty R  --repetition-context-size N
      --presence-penalty X  --frequency-penalty X
      --seed N                  same seed, same output
      --stop TEXT               stop before TEXT (repeatable)
      --system TEXT             system message (chat templates)
      --no-thinking             pass enable_thinking=false to the template (Qwen3)`;

export const MODEL_HELP = `model:
  -m, --model DIR               checkpoint directory (Hugging Face or MLX format)
      --device cpu|cuda|auto    (default auto)
      --dtype auto|float32|bfloat16|float16`;

type Values = Record<string, string | boolean | string[] | undefined>;

function loadOptions(v: Values): LoadLanguageModelOptions {
  const o: LoadLanguageModelOptions = {};
  if (v.device !== undefined) o.device = v.device as LoadLanguageModelOptions['device'];
  if (v.dtype !== undefined) o.dtype = v.dtype as LoadLanguageModelOptions['dtype'];
  return o;
}

/** Loads the checkpoint in `dir` with the --device / --dtype flags, showing the progress on stderr. */
export async function loadModel(io: CommandIO, dir: string, v: Values): Promise<LanguageModel> {
  const progress = loadProgress(io, 'loading');
  const lm = await loadLanguageModel(dir, { ...loadOptions(v), onProgress: (p) => progress.update(p.fraction, p.phase) });
  progress.done();
  return lm;
}

export function generateOptions(v: Values): GenerateOptions {
  const s = (k: string) => v[k] as string | undefined;
  const o: GenerateOptions = {
    maxTokens: num(s('max-tokens')),
    temperature: num(s('temperature')),
    topK: num(s('top-k')),
    topP: num(s('top-p')),
    minP: num(s('min-p')),
    repetitionPenalty: num(s('repetition-penalty')),
    repetitionContextSize: num(s('repetition-context-size')),
    presencePenalty: num(s('presence-penalty')),
    frequencyPenalty: num(s('frequency-penalty')),
    seed: num(s('seed')),
  };
  if (v.stop) o.stop = v.stop as string[];
  if (v['no-thinking']) o.chat = { extras: { enable_thinking: false } };
  // Report bad flags by their flag name.
  for (const [flag, key] of Object.entries({ 'max-tokens': 'maxTokens', 'top-k': 'topK', 'top-p': 'topP', 'min-p': 'minP', seed: 'seed', temperature: 'temperature' })) {
    if (Number.isNaN(o[key as keyof GenerateOptions])) throw new InvalidArgumentError(`--${flag} must be a number, got "${s(flag)}"`, key);
  }
  return o;
}
