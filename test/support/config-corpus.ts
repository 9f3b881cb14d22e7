/**
 * A deterministic corpus of broken config.json files: every field the loader reads, crossed with
 * {missing, wrong JSON type, zero, negative, fractional, NaN / Infinity literals, "NaN" as a
 * string, huge}, plus impossible combinations, unsupported rope types / activations / layer types /
 * quantization formats, and text that is not JSON at all. Each case names the typed error and the
 * `field` it must carry. Valid family configs are included as controls.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { CorpusCase, ExpectedError } from './corpus-types.js';

type Json = Record<string, unknown>;

const MISSING = Symbol('missing');
type Raw = string | typeof MISSING;

export const LLAMA: Json = {
  model_type: 'llama', vocab_size: 128, hidden_size: 64, intermediate_size: 96, num_hidden_layers: 2,
  num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 256, rms_norm_eps: 1e-5,
  rope_theta: 10000, tie_word_embeddings: false, hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2,
};
const MISTRAL: Json = { ...LLAMA, model_type: 'mistral', sliding_window: 16 };
const QWEN2: Json = { ...LLAMA, model_type: 'qwen2', use_sliding_window: true, sliding_window: 16, max_window_layers: 1 };
const QWEN3: Json = { ...LLAMA, model_type: 'qwen3', head_dim: 32 };
const GEMMA2: Json = {
  ...LLAMA, model_type: 'gemma2', head_dim: 16, sliding_window: 16, attn_logit_softcapping: 50.0,
  final_logit_softcapping: 30.0, query_pre_attn_scalar: 16, hidden_activation: 'gelu_pytorch_tanh',
};
const GEMMA3: Json = {
  ...LLAMA, model_type: 'gemma3_text', head_dim: 16, sliding_window: 16, sliding_window_pattern: 6,
  rope_local_base_freq: 10000, rope_theta: 1000000, query_pre_attn_scalar: 16, num_hidden_layers: 7,
};
const PHI3: Json = { ...LLAMA, model_type: 'phi3', sliding_window: 15, partial_rotary_factor: 0.5 };

/** JSON text of `base` with `key` replaced by raw JSON text (or removed). */
function withRaw(base: Json, key: string, raw: Raw): string {
  const o: Json = { ...base };
  if (raw === MISSING) {
    delete o[key];
    return JSON.stringify(o);
  }
  o[key] = '@@RAW@@';
  return JSON.stringify(o).replace('"@@RAW@@"', raw);
}

const REQUIRED_INTS = ['vocab_size', 'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'max_position_embeddings'];
const BAD_INT: Raw[] = [MISSING, 'null', '"64"', 'true', '[]', '{}', '0', '-1', '1.5', '64.0', '6.4e1', '"NaN"', 'NaN', 'Infinity', '1e400',
  '99999999999999999999', '2147483648', '-9223372036854775808'];
const BAD_OPT_INT: Raw[] = ['"4"', 'true', '[]', '{}', '-1', '1.5', 'NaN', '1e400', '99999999999999999999', '"NaN"'];
const BAD_FLOAT: Raw[] = ['"1e-5"', 'true', '[]', '{}', '0', '-1e-5', 'NaN', 'Infinity', '-Infinity', '1e400', '"NaN"', '-0.0'];
const BAD_BOOL: Raw[] = ['"true"', '1', '0', '[]', '{}', '"false"'];

export function buildConfigCorpus(root: string): CorpusCase[] {
  const cases: CorpusCase[] = [];
  let n = 0;
  const add = (group: string, text: string, error: ExpectedError | null, field?: string) => {
    const dir = join(root, `${group}-${n}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config.json'), text);
    cases.push({ id: `${group}#${n++}`, group, op: 'config', path: dir, error, ...(field === undefined ? {} : { field }) });
  };
  const bad = (group: string, base: Json, key: string, raws: Raw[], field = key, error: ExpectedError = 'ConfigError') => {
    for (const raw of raws) add(group, withRaw(base, key, raw), error, field);
  };
  const obj = (group: string, o: Json, error: ExpectedError | null, field?: string) => add(group, JSON.stringify(o), error, field);

  for (const base of [LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA2, GEMMA3, PHI3]) obj('valid', base, null);

  for (const key of REQUIRED_INTS) bad('required-int', LLAMA, key, BAD_INT);
  bad('optional-int', LLAMA, 'num_key_value_heads', [...BAD_OPT_INT, '0']);
  bad('optional-int', LLAMA, 'head_dim', [...BAD_OPT_INT, '0']);
  bad('optional-int', LLAMA, 'bos_token_id', BAD_OPT_INT);
  bad('optional-int', MISTRAL, 'sliding_window', [...BAD_OPT_INT, '0']);
  bad('optional-int', QWEN2, 'max_window_layers', BAD_OPT_INT);
  bad('optional-int', GEMMA3, 'sliding_window_pattern', [...BAD_OPT_INT, '0']);
  bad('float', LLAMA, 'rms_norm_eps', [...BAD_FLOAT, '1', '2.5']);
  bad('float', LLAMA, 'rope_theta', BAD_FLOAT);
  bad('float', GEMMA3, 'rope_local_base_freq', BAD_FLOAT);
  bad('float', GEMMA2, 'attn_logit_softcapping', ['0', '-50', '"50"', 'NaN', 'true']);
  bad('float', GEMMA2, 'final_logit_softcapping', ['0', '-30', '"30"', 'Infinity', '[]']);
  bad('float', GEMMA2, 'query_pre_attn_scalar', ['0', '-1', '"256"', 'NaN']);
  bad('float', PHI3, 'partial_rotary_factor', ['0', '-0.5', '1.5', '"0.5"', 'NaN', '0.1', '0.05']);
  for (const key of ['tie_word_embeddings', 'attention_bias', 'mlp_bias']) bad('bool', LLAMA, key, BAD_BOOL);
  bad('bool', QWEN2, 'use_sliding_window', BAD_BOOL);

  // model_type and activation.
  bad('model-type', LLAMA, 'model_type', [MISSING, 'null', '1', '[]', 'true', '{}']);
  bad('model-type', LLAMA, 'model_type', ['"gpt2"', '"LLAMA"', '""', '"gemma3"', '"llama "', '"gemma"', '"qwen2_moe"'], 'model_type', 'UnsupportedError');
  bad('activation', LLAMA, 'hidden_act', ['"relu"', '"quick_gelu"', '""', '"SiLU"'], 'hidden_act', 'UnsupportedError');
  bad('activation', LLAMA, 'hidden_act', ['1', '[]', 'true']);
  bad('activation', GEMMA2, 'hidden_activation', ['"relu"'], 'hidden_activation', 'UnsupportedError');
  bad('dtype', LLAMA, 'torch_dtype', ['5', '[]', 'true']);
  bad('eos', LLAMA, 'eos_token_id', ['"2"', '[1,"2"]', '-1', '[-1]', '1.5', '{}', '[[1]]', '[null]']);

  // Impossible combinations.
  obj('combo', { ...LLAMA, num_key_value_heads: 3 }, 'ConfigError', 'num_key_value_heads');
  obj('combo', { ...LLAMA, num_key_value_heads: 8 }, 'ConfigError', 'num_key_value_heads');
  obj('combo', { ...LLAMA, hidden_size: 66 }, 'ConfigError', 'num_attention_heads');
  obj('combo', { ...LLAMA, hidden_size: 60, num_attention_heads: 4 }, 'ConfigError', 'head_dim');  // 15: odd
  obj('combo', { ...LLAMA, head_dim: 15 }, 'ConfigError', 'head_dim');
  obj('combo', { ...LLAMA, vocab_size: 2147483647, hidden_size: 1048576, num_attention_heads: 16, num_key_value_heads: 16 }, 'ConfigError', 'vocab_size');
  obj('combo', { ...LLAMA, hidden_size: 1048576, num_attention_heads: 16384, num_key_value_heads: 16384, head_dim: 16384 }, 'ConfigError', 'head_dim');
  obj('combo', { ...LLAMA, layer_types: ['full_attention'] }, 'ConfigError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 'full_attention', 'full_attention'] }, 'ConfigError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 'foo'] }, 'ConfigError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 1] }, 'ConfigError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: 'full_attention' }, 'ConfigError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 'chunked_attention'] }, 'UnsupportedError', 'layer_types');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 'sliding_attention'] }, 'ConfigError', 'sliding_window');
  obj('combo', { ...LLAMA, layer_types: ['full_attention', 'sliding_attention'], sliding_window: 0 }, 'ConfigError', 'sliding_window');
  obj('combo', { ...GEMMA2, sliding_window: null }, 'ConfigError', 'sliding_window');
  obj('combo', { ...GEMMA3, sliding_window: undefined }, 'ConfigError', 'sliding_window');

  // Rope.
  const rope = (o: unknown, field: string, error: ExpectedError = 'ConfigError', key = 'rope_scaling') =>
    obj('rope', { ...LLAMA, [key]: o }, error, field);
  rope('linear', 'rope_scaling'); rope([], 'rope_scaling'); rope(5, 'rope_scaling');
  rope({ type: 'longrope', factor: 2 }, 'rope_scaling.type', 'UnsupportedError');
  for (const t of ['su', 'mrope', 'LINEAR', '', 'proportional']) rope({ rope_type: t, factor: 2 }, 'rope_scaling.rope_type', 'UnsupportedError');
  rope({ rope_type: 5 }, 'rope_scaling.rope_type');
  rope({ type: null, rope_type: [] }, 'rope_scaling.rope_type');
  rope({ rope_type: 'linear' }, 'rope_scaling.factor');
  for (const f of [0, -2, '2', null, [], true]) rope({ rope_type: 'dynamic', factor: f }, 'rope_scaling.factor');
  const l3 = { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 };
  for (const k of ['low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings']) {
    const o: Json = { ...l3 };
    delete o[k];
    rope(o, `rope_scaling.${k}`);
  }
  rope({ ...l3, high_freq_factor: 1 }, 'rope_scaling.high_freq_factor');
  rope({ ...l3, original_max_position_embeddings: 0 }, 'rope_scaling.original_max_position_embeddings');
  rope({ ...l3, original_max_position_embeddings: 8192.5 }, 'rope_scaling.original_max_position_embeddings');
  const yarn = { rope_type: 'yarn', factor: 4 };
  rope({ ...yarn, beta_fast: 'x' }, 'rope_scaling.beta_fast');
  rope({ ...yarn, beta_slow: 0 }, 'rope_scaling.beta_slow');
  rope({ ...yarn, attention_factor: 0 }, 'rope_scaling.attention_factor');
  rope({ ...yarn, truncate: 'no' }, 'rope_scaling.truncate');
  rope({ ...yarn, mscale: '1' }, 'rope_scaling.mscale');
  rope({ ...yarn, original_max_position_embeddings: -1 }, 'rope_scaling.original_max_position_embeddings');
  rope({ ...yarn, partial_rotary_factor: 2 }, 'rope_scaling.partial_rotary_factor');
  const rp = (o: unknown, field: string, error: ExpectedError = 'ConfigError') => rope(o, field, error, 'rope_parameters');
  rp('x', 'rope_parameters');
  rp({ rope_type: 'default', rope_theta: -1 }, 'rope_parameters.rope_theta');
  rp({ rope_type: 'default', rope_theta: 'NaN' }, 'rope_parameters.rope_theta');
  rp({ rope_type: 'ntk' }, 'rope_parameters.rope_type', 'UnsupportedError');
  rp({ full_attention: { rope_type: 'default' }, chunked_attention: {} }, 'rope_parameters.chunked_attention', 'UnsupportedError');
  rp({ sliding_attention: { rope_type: 'default' } }, 'rope_parameters.full_attention');
  rp({ full_attention: 5, sliding_attention: {} }, 'rope_parameters.full_attention');
  rp({ full_attention: { rope_type: 'yarn' } }, 'rope_parameters.full_attention.factor');
  rp({ full_attention: {}, sliding_attention: { rope_type: 'linear', factor: -1 } }, 'rope_parameters.sliding_attention.factor');

  // MLX quantization and other quantizers.
  const quant = (o: unknown, field: string, error: ExpectedError = 'ConfigError', key = 'quantization') =>
    obj('quant', { ...LLAMA, [key]: o }, error, field);
  quant('x', 'quantization'); quant([], 'quantization'); quant(4, 'quantization');
  quant({}, 'quantization.bits');
  quant({ bits: 4 }, 'quantization.group_size');
  for (const b of [0, -4, '4', 4.5, null]) quant({ group_size: 64, bits: b }, 'quantization.bits');
  for (const b of [1, 7, 16]) quant({ group_size: 64, bits: b }, 'quantization.bits', 'UnsupportedError');
  for (const g of [0, -64, '64', 63.5]) quant({ group_size: g, bits: 4 }, 'quantization.group_size');
  for (const g of [16, 100, 256]) quant({ group_size: g, bits: 4 }, 'quantization.group_size', 'UnsupportedError');
  quant({ group_size: 64, bits: 4, mode: 'mxfp4' }, 'quantization.mode', 'UnsupportedError');
  quant({ group_size: 64, bits: 4, mode: 1 }, 'quantization.mode');
  const path = 'model.layers.0.mlp.down_proj';
  for (const v of [5, 'x', [], 'false']) quant({ group_size: 64, bits: 4, [path]: v }, `quantization.${path}`);
  quant({ group_size: 64, bits: 4, [path]: { bits: '8' } }, `quantization.${path}.bits`);
  quant({ group_size: 64, bits: 4, [path]: { bits: 0 } }, `quantization.${path}.bits`);
  quant({ group_size: 64, bits: 4, [path]: { bits: 3, group_size: 48 } }, `quantization.${path}.group_size`, 'UnsupportedError');
  quant({ quant_method: 'gptq', bits: 4, group_size: 128 }, 'quantization_config.quant_method', 'UnsupportedError', 'quantization_config');
  quant({ quant_method: 'fp8' }, 'quantization_config.quant_method', 'UnsupportedError', 'quantization_config');
  quant({ bits: 4 }, 'quantization_config.group_size', 'ConfigError', 'quantization_config');

  // Not a JSON object at all.
  for (const text of ['', '{', '[]', 'null', '"x"', '1', '{"model_type":"llama",}', "{'a':1}", '{"a":1}{}', '\ufeff{}',
    '{"model_type":"llama","model_type":"llama"}', '{"a":"\\ud800"}', `${'['.repeat(10000)}`, '{"a":01}'])
    add('not-json', text, 'ConfigError', 'config');
  const bytes = new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]);
  { const dir = join(root, `not-utf8-${n}`); mkdirSync(dir, { recursive: true }); writeFileSync(join(dir, 'config.json'), bytes);
    cases.push({ id: `not-utf8#${n++}`, group: 'not-json', op: 'config', path: dir, error: 'ConfigError', field: 'config' }); }

  // No config.json, or one that is a directory.
  { const dir = join(root, `io-${n}`); mkdirSync(dir, { recursive: true });
    cases.push({ id: `io#${n++}`, group: 'io', op: 'config', path: dir, error: 'IoError', field: join(dir, 'config.json') }); }
  { const dir = join(root, `io-${n}`); mkdirSync(join(dir, 'config.json'), { recursive: true });
    cases.push({ id: `io#${n++}`, group: 'io', op: 'config', path: dir, error: 'IoError', field: join(dir, 'config.json') }); }
  return cases;
}
