// config.json dialects -> one typed config. The configs below follow the published config.json
// of each family's checkpoints (sizes shrunk where the exact value does not matter), in the
// transformers 4.x form most hub checkpoints carry and in the transformers >= 5 form.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { parseConfig, readConfig } from '../lib/artifacts/index.js';
import { ConfigError, IoError, UnsupportedError } from '../lib/errors.js';

const parse = (o: Record<string, unknown>) => parseConfig(JSON.stringify(o));

const llama32 = {
  architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009], head_dim: 64, hidden_act: 'silu', hidden_size: 2048,
  initializer_range: 0.02, intermediate_size: 8192, max_position_embeddings: 131072, mlp_bias: false,
  model_type: 'llama', num_attention_heads: 32, num_hidden_layers: 16, num_key_value_heads: 8,
  pretraining_tp: 1, rms_norm_eps: 1e-05,
  rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' },
  rope_theta: 500000.0, tie_word_embeddings: true, torch_dtype: 'bfloat16', transformers_version: '4.45.0.dev0',
  use_cache: true, vocab_size: 128256,
};

describe('config dialects', () => {
  it('llama 3.2 (4.x rope_scaling llama3, eos list, explicit head_dim)', () => {
    const c = parse(llama32);
    expect(c).toMatchObject({
      modelType: 'llama', vocabSize: 128256, hiddenSize: 2048, intermediateSize: 8192, numLayers: 16, numHeads: 32,
      numKvHeads: 8, headDim: 64, maxPositionEmbeddings: 131072, normEps: 1e-5, tieWordEmbeddings: true,
      attentionBias: false, hiddenAct: 'silu', slidingWindow: 0, torchDtype: 'bfloat16', bosTokenId: 128000,
      eosTokenIds: [128001, 128008, 128009], quantization: null, ropeLocal: null,
    });
    expect(c.rope).toMatchObject({ type: 'llama3', theta: 500000, factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPosition: 8192, partialRotaryFactor: 1 });
    expect(c.layerTypes).toEqual(Array(16).fill('full_attention'));
  });

  it('llama in the transformers 5 form (rope_parameters, dtype)', () => {
    const { rope_scaling, rope_theta, torch_dtype, ...rest } = llama32;
    void rope_theta; void torch_dtype;
    const c = parse({ ...rest, dtype: 'float32', rope_parameters: { ...rope_scaling, rope_theta: 500000.0 } });
    expect(c.rope).toMatchObject({ type: 'llama3', theta: 500000, factor: 32, originalMaxPosition: 8192 });
    expect(c.torchDtype).toBe('float32');
  });

  it('rope_scaling with the old "type" key: linear, dynamic, yarn', () => {
    expect(parse({ ...llama32, rope_scaling: { type: 'linear', factor: 4 } }).rope).toMatchObject({ type: 'linear', factor: 4 });
    expect(parse({ ...llama32, rope_scaling: { type: 'dynamic', factor: 2 } }).rope).toMatchObject({ type: 'dynamic', factor: 2, originalMaxPosition: 0 });
    const yarn = parse({ ...llama32, rope_scaling: { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768, beta_fast: 16, attention_factor: 1.2 } }).rope;
    expect(yarn).toMatchObject({ type: 'yarn', factor: 4, originalMaxPosition: 32768, betaFast: 16, betaSlow: 1, attentionFactor: 1.2, truncate: true });
    expect(parse({ ...llama32, rope_scaling: { rope_type: 'default' } }).rope.type).toBe('default');
    expect(parse({ ...llama32, rope_scaling: null }).rope).toMatchObject({ type: 'default', theta: 500000 });
  });

  it('mistral: sliding_window applies to every layer, null means none, head_dim null derives', () => {
    const base = {
      model_type: 'mistral', vocab_size: 32000, hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 4,
      num_attention_heads: 32, num_key_value_heads: 8, max_position_embeddings: 32768, rms_norm_eps: 1e-5,
      rope_theta: 10000.0, sliding_window: 4096, tie_word_embeddings: false, hidden_act: 'silu', head_dim: null,
      bos_token_id: 1, eos_token_id: 2,
    };
    const v01 = parse(base);
    expect(v01.layerTypes).toEqual(Array(4).fill('sliding_attention'));
    expect(v01.slidingWindow).toBe(4096);
    expect(v01.headDim).toBe(128);
    expect(v01.eosTokenIds).toEqual([2]);
    const v03 = parse({ ...base, sliding_window: null, rope_theta: 1000000.0 });
    expect(v03.layerTypes).toEqual(Array(4).fill('full_attention'));
    expect(v03.slidingWindow).toBe(0);
    expect(v03.rope.theta).toBe(1e6);
  });

  it('qwen2.5: use_sliding_window false means no window, q/k/v biases by default', () => {
    const c = parse({
      model_type: 'qwen2', vocab_size: 151936, hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24,
      num_attention_heads: 14, num_key_value_heads: 2, max_position_embeddings: 32768, rms_norm_eps: 1e-6,
      rope_theta: 1000000.0, sliding_window: 32768, use_sliding_window: false, max_window_layers: 21,
      tie_word_embeddings: true, hidden_act: 'silu', bos_token_id: 151643, eos_token_id: 151643, torch_dtype: 'bfloat16',
    });
    expect(c).toMatchObject({ headDim: 64, attentionBias: true, slidingWindow: 0, tieWordEmbeddings: true });
    expect(c.layerTypes.every((t) => t === 'full_attention')).toBe(true);
    const sw = parse({
      model_type: 'qwen2', vocab_size: 100, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 4,
      num_attention_heads: 4, max_position_embeddings: 128, sliding_window: 8, use_sliding_window: true, max_window_layers: 2,
    });
    expect(sw.layerTypes).toEqual(['full_attention', 'full_attention', 'sliding_attention', 'sliding_attention']);
    expect(sw.slidingWindow).toBe(8);
    expect(sw.numKvHeads).toBe(4);
  });

  it('qwen3: explicit head_dim different from hidden/heads, layer_types of transformers >= 4.5x', () => {
    const c = parse({
      model_type: 'qwen3', vocab_size: 151936, hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 3,
      num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, max_position_embeddings: 40960,
      rms_norm_eps: 1e-6, rope_theta: 1000000, rope_scaling: null, attention_bias: false, sliding_window: null,
      use_sliding_window: false, max_window_layers: 28, tie_word_embeddings: true,
      layer_types: ['full_attention', 'full_attention', 'full_attention'],
    });
    expect(c).toMatchObject({ headDim: 128, numHeads: 16, attentionBias: false, slidingWindow: 0 });
  });

  it('gemma2: even layers slide, soft-capping, query_pre_attn_scalar, hidden_activation', () => {
    const c = parse({
      model_type: 'gemma2', vocab_size: 256000, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 6,
      num_attention_heads: 8, num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 8192, rms_norm_eps: 1e-6,
      rope_theta: 10000.0, sliding_window: 4096, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0,
      query_pre_attn_scalar: 256, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh',
      bos_token_id: 2, eos_token_id: [1, 107],
    });
    expect(c.layerTypes).toEqual(['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention']);
    expect(c).toMatchObject({
      slidingWindow: 4096, attnLogitSoftcapping: 50, finalLogitSoftcapping: 30, queryPreAttnScalar: 256,
      hiddenAct: 'gelu_tanh', tieWordEmbeddings: true, headDim: 256, ropeLocal: null,
    });
  });

  it('gemma3_text 4.x: rope_local_base_freq and sliding_window_pattern, scaling on global layers only', () => {
    const c = parse({
      model_type: 'gemma3_text', vocab_size: 262144, hidden_size: 1152, intermediate_size: 6912, num_hidden_layers: 13,
      num_attention_heads: 4, num_key_value_heads: 1, head_dim: 256, max_position_embeddings: 32768, rms_norm_eps: 1e-6,
      rope_theta: 1000000.0, rope_local_base_freq: 10000.0, rope_scaling: { rope_type: 'linear', factor: 8.0 },
      sliding_window: 512, sliding_window_pattern: 6, query_pre_attn_scalar: 256, attn_logit_softcapping: null,
      final_logit_softcapping: null, hidden_activation: 'gelu_pytorch_tanh',
    });
    const expected = Array.from({ length: 13 }, (_, i) => ((i + 1) % 6 === 0 ? 'full_attention' : 'sliding_attention'));
    expect(c.layerTypes).toEqual(expected);
    expect(c.layerTypes[5]).toBe('full_attention');
    expect(c.rope).toMatchObject({ type: 'linear', factor: 8, theta: 1e6 });
    expect(c.ropeLocal).toMatchObject({ type: 'default', theta: 10000, factor: 1 });
    expect(c).toMatchObject({ attnLogitSoftcapping: 0, finalLogitSoftcapping: 0, slidingWindow: 512 });
  });

  it('gemma3_text in the transformers 5 form: per-layer-type rope_parameters and layer_types', () => {
    const c = parse({
      model_type: 'gemma3_text', vocab_size: 262208, hidden_size: 2560, intermediate_size: 10240, num_hidden_layers: 4,
      num_attention_heads: 8, num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 131072,
      sliding_window: 1024, query_pre_attn_scalar: 256,
      layer_types: ['sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention'],
      rope_parameters: {
        full_attention: { rope_type: 'linear', factor: 8.0, rope_theta: 1000000.0 },
        sliding_attention: { rope_type: 'default', rope_theta: 10000.0 },
      },
    });
    expect(c.layerTypes).toEqual(['sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention']);
    expect(c.rope).toMatchObject({ type: 'linear', factor: 8, theta: 1e6 });
    expect(c.ropeLocal).toMatchObject({ type: 'default', theta: 1e4 });
    expect(c.tieWordEmbeddings).toBe(true);
  });

  it('phi3: window on every layer, partial rotary factor, null window', () => {
    const base = {
      model_type: 'phi3', vocab_size: 32064, hidden_size: 3072, intermediate_size: 8192, num_hidden_layers: 2,
      num_attention_heads: 32, num_key_value_heads: 32, max_position_embeddings: 4096, original_max_position_embeddings: 4096,
      rms_norm_eps: 1e-5, rope_theta: 10000.0, rope_scaling: null, sliding_window: 2047, hidden_act: 'silu',
      tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 32000,
    };
    const c = parse(base);
    expect(c).toMatchObject({ headDim: 96, slidingWindow: 2047, numKvHeads: 32 });
    expect(c.layerTypes).toEqual(['sliding_attention', 'sliding_attention']);
    const p = parse({ ...base, sliding_window: null, partial_rotary_factor: 0.75 });
    expect(p.slidingWindow).toBe(0);
    expect(p.rope.partialRotaryFactor).toBe(0.75);
    expect(parse({ ...base }).normEps).toBe(1e-5);
    const { rms_norm_eps, ...noEps } = base;
    void rms_norm_eps;
    expect(parse(noEps).normEps).toBe(1e-5);  // phi3's class default
  });

  it('MLX quantization with per-layer overrides (also under quantization_config)', () => {
    const q = {
      group_size: 64, bits: 4, 'model.embed_tokens': { group_size: 32, bits: 6 }, 'model.layers.0.mlp.down_proj': false,
      'lm_head': true,
    };
    for (const key of ['quantization', 'quantization_config']) {
      const c = parse({ ...llama32, [key]: q });
      expect(c.quantization).toEqual({ bits: 4, groupSize: 64 });
      expect(c.quantOverrides).toEqual([
        { path: 'model.embed_tokens', spec: { bits: 6, groupSize: 32 } },
        { path: 'model.layers.0.mlp.down_proj', spec: null },
        { path: 'lm_head', spec: { bits: 4, groupSize: 64 } },
      ]);
    }
    expect(parse({ ...llama32, quantization: { group_size: 64, bits: 8, mode: 'affine' } }).quantization).toEqual({ bits: 8, groupSize: 64 });
  });

  it('activations map onto the three kernels', () => {
    expect(parse({ ...llama32, hidden_act: 'gelu' }).hiddenAct).toBe('gelu');
    expect(parse({ ...llama32, hidden_act: 'gelu_new' }).hiddenAct).toBe('gelu_tanh');
    expect(parse({ ...llama32, hidden_act: 'swish' }).hiddenAct).toBe('silu');
  });

  it('errors name the field; readConfig reads the directory', async () => {
    expect(() => parse({ ...llama32, num_key_value_heads: 5 })).toThrow(ConfigError);
    try { parse({ ...llama32, num_key_value_heads: 5 }); } catch (e) { expect((e as ConfigError).field).toBe('num_key_value_heads'); }
    expect(() => parse({ ...llama32, model_type: 'gpt2' })).toThrow(UnsupportedError);
    const dir = mkdtempSync(join(tmpdir(), 'mlxb-config-'));
    try {
      await expect(readConfig(dir)).rejects.toBeInstanceOf(IoError);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(llama32));
      expect((await readConfig(dir)).vocabSize).toBe(128256);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
