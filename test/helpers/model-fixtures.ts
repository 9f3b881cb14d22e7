// Reads the oracle fixtures of test/fixtures/models/ (made by scripts/oracle/make_fixtures.py on the
// GPU machine with transformers). Every file is checked against manifest.json's SHA-256 before use.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const FIXTURE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'models');

export interface Oracle {
  name: string;
  model_type: string;
  weight_dtype: 'float32' | 'bfloat16';
  config_dialect: string;
  vocab_size: number;
  prompt_ids: number[];
  prompt_top2_margins: number[];
  greedy_tokens: number[];
  greedy_top2_margins: number[];
  logits: { file: string; shape: [number, number]; row_max_abs: number[] };
  greedy_logits: { file: string; shape: [number, number] };
  rope_inv_freq_at_load: Record<string, number[] | number>;
  rope_inv_freq_after_prompt: Record<string, number[] | number>;
  loaded_rope_parameters: Record<string, unknown> | null;
  loaded_layer_types: string[] | null;
  notes: Record<string, unknown>;
}

interface Manifest {
  fixtures: Record<string, Record<string, string>>;
}

export function manifest(): Manifest {
  return JSON.parse(readFileSync(join(FIXTURE_ROOT, 'manifest.json'), 'utf8')) as Manifest;
}

export function fixtureNames(): string[] {
  return Object.keys(manifest().fixtures).sort();
}

export function fixtureDir(name: string): string {
  return join(FIXTURE_ROOT, name);
}

/** Bytes of one fixture file, after checking its SHA-256 against the manifest. */
export function verifiedBytes(name: string, file: string): Buffer {
  const want = manifest().fixtures[name]?.[file];
  if (!want) throw new Error(`${name}/${file} is not in the fixture manifest`);
  const bytes = readFileSync(join(FIXTURE_ROOT, name, file));
  const got = createHash('sha256').update(bytes).digest('hex');
  if (got !== want) throw new Error(`${name}/${file}: sha256 ${got} does not match the manifest (${want})`);
  return bytes;
}

export function oracle(name: string): Oracle {
  return JSON.parse(verifiedBytes(name, 'oracle.json').toString('utf8')) as Oracle;
}

export function f32(name: string, file: string): Float32Array {
  const b = verifiedBytes(name, file);
  const out = new Float32Array(b.byteLength / 4);
  for (let i = 0; i < out.length; i++) out[i] = b.readFloatLE(i * 4);
  return out;
}

/** Checks every file a model load reads (config + weights) so a test never runs on altered data. */
export function verifyFixture(name: string): void {
  for (const file of Object.keys(manifest().fixtures[name] ?? {})) verifiedBytes(name, file);
}
