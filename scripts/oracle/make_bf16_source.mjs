// Random-weight bfloat16 checkpoints (config.json, model.safetensors, generation_config.json) in
// Hugging Face naming, for the quantized L2 fixtures whose shapes the 4-bit tensor-core CUDA GEMVs
// take (hidden 256, K of every linear a multiple of 256). Pure Node and deterministic for a given
// seed: one xorshift32 stream, Box-Muller normals, tensors drawn in sorted name order, float32
// values rounded to bfloat16 (nearest, ties to even). The scale of each tensor follows
// scripts/oracle/make_fixtures.py's init_weights (unit-gain linears, peaked but not degenerate
// logits; tied heads get small embeddings, input rms `tiedInputRms` (default 0.4, as there) and a
// final-norm gain that brings the logit std back to ~3; Gemma's (1 + w) norms drawn around 0).
// Used by make_quant_fixtures.mjs; the source checkpoint itself is not committed.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { encodeHeader } from '../../dist/quantize/safetensors_write.js';

const GENERATION_CONFIG = {
  _from_model_config: true, bos_token_id: 1, eos_token_id: 2, output_attentions: false,
  output_hidden_states: false, pad_token_id: 0, transformers_version: '5.17.0', use_cache: true,
};

/** The Hugging Face config of each family at the given shape (what transformers 5.17 reads). */
function hfConfig(family, s) {
  const common = {
    attention_bias: false, attention_dropout: 0.0, bos_token_id: 1, eos_token_id: 2, pad_token_id: 0,
    head_dim: s.headDim, hidden_size: s.hidden, intermediate_size: s.inter, initializer_range: 0.02,
    max_position_embeddings: 256, num_attention_heads: s.heads, num_hidden_layers: s.layers,
    num_key_value_heads: s.kvHeads, tie_word_embeddings: s.tied, transformers_version: '5.17.0',
    use_cache: true, vocab_size: s.vocab,
  };
  if (family === 'llama') {
    return {
      architectures: ['LlamaForCausalLM'], model_type: 'llama', ...common, dtype: 'bfloat16', hidden_act: 'silu',
      mlp_bias: false, pretraining_tp: 1, rms_norm_eps: 1e-5,
      rope_parameters: { factor: 8.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 32, rope_theta: 10000.0, rope_type: 'llama3' },
    };
  }
  if (family === 'qwen3') {
    return {
      architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', ...common, dtype: 'bfloat16', hidden_act: 'silu',
      layer_types: Array(s.layers).fill('full_attention'), max_window_layers: 28, rms_norm_eps: 1e-6,
      rope_parameters: { rope_theta: 1000000.0, rope_type: 'default' }, sliding_window: null, use_sliding_window: false,
    };
  }
  if (family === 'gemma3_text') {
    // The older dialect (as test/fixtures/models/gemma3_text): layer i slides iff (i + 1) % pattern != 0.
    return {
      architectures: ['Gemma3ForCausalLM'], model_type: 'gemma3_text', ...common, torch_dtype: 'bfloat16',
      attn_logit_softcapping: null, final_logit_softcapping: null, hidden_activation: 'gelu_pytorch_tanh',
      query_pre_attn_scalar: s.headDim, rms_norm_eps: 1e-6, rope_local_base_freq: 10000.0,
      rope_scaling: { factor: 2.0, rope_type: 'linear' }, rope_theta: 1000000.0, sliding_window: 6,
      sliding_window_pattern: 2, use_bidirectional_attention: false, transformers_version: '4.46.0',
    };
  }
  throw new Error(`unknown family ${family}`);
}

/** [name, shape] of every tensor, Hugging Face naming. */
function tensorList(family, s) {
  const q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;
  const t = [['model.embed_tokens.weight', [s.vocab, s.hidden]], ['model.norm.weight', [s.hidden]]];
  if (!s.tied) t.push(['lm_head.weight', [s.vocab, s.hidden]]);
  for (let i = 0; i < s.layers; i++) {
    const p = `model.layers.${i}.`;
    t.push(
      [p + 'input_layernorm.weight', [s.hidden]], [p + 'post_attention_layernorm.weight', [s.hidden]],
      [p + 'self_attn.q_proj.weight', [q, s.hidden]], [p + 'self_attn.k_proj.weight', [kv, s.hidden]],
      [p + 'self_attn.v_proj.weight', [kv, s.hidden]], [p + 'self_attn.o_proj.weight', [s.hidden, q]],
      [p + 'mlp.gate_proj.weight', [s.inter, s.hidden]], [p + 'mlp.up_proj.weight', [s.inter, s.hidden]],
      [p + 'mlp.down_proj.weight', [s.hidden, s.inter]],
    );
    if (family !== 'llama') t.push([p + 'self_attn.q_norm.weight', [s.headDim]], [p + 'self_attn.k_norm.weight', [s.headDim]]);
    if (family === 'gemma3_text') t.push([p + 'pre_feedforward_layernorm.weight', [s.hidden]], [p + 'post_feedforward_layernorm.weight', [s.hidden]]);
  }
  return t.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function xorshift(seed) {
  let state = (seed * 2654435761) >>> 0 || 1;
  return () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state;
  };
}

function normals(seed) {
  const next = xorshift(seed);
  let spare = null;
  return () => {
    if (spare !== null) { const v = spare; spare = null; return v; }
    const u1 = (next() + 1) / 4294967297, u2 = next() / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
}

const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function bf16(x) {
  f32[0] = x;
  const u = u32[0];
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * Writes DIR/{config.json, model.safetensors, generation_config.json}: family llama | qwen3 |
 * gemma3_text; shape { hidden, inter, layers, heads, kvHeads, headDim, vocab, tied, tiedInputRms? }. Returns the
 * random prompt (32 ids in [3, vocab)) drawn from the same seed.
 */
export function writeBf16Source(dir, family, s, seed) {
  const onePlus = family === 'gemma3_text';
  const embScale = onePlus ? Math.sqrt(s.hidden) : 1;
  const embStd = s.tied ? (s.tiedInputRms ?? 0.4) / embScale : 1;
  const finalGain = s.tied ? 3.2 / (Math.sqrt(s.hidden) * embStd) : 1;
  const normal = normals(seed);
  const list = tensorList(family, s);
  const datas = list.map(([name, shape]) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const out = new Uint16Array(n);
    for (let i = 0; i < n; i++) {
      const r = normal();
      let v;
      if (name.endsWith('norm.weight')) {
        v = (name === 'model.norm.weight' ? finalGain : 1) + 0.1 * r;
        if (onePlus) v -= 1;
      } else if (name.includes('embed_tokens')) v = r * embStd;
      else if (name.startsWith('lm_head')) v = r * (3 / Math.sqrt(s.hidden));
      else v = r / Math.sqrt(shape[1]);
      out[i] = bf16(v);
    }
    return new Uint8Array(out.buffer);
  });
  const header = encodeHeader(list.map(([name, shape], i) => ({ name, dtype: 'BF16', shape, nbytes: datas[i].byteLength })), { format: 'pt' });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'model.safetensors'), Buffer.concat([header, ...datas]));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(hfConfig(family, s), null, 2) + '\n');
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify(GENERATION_CONFIG, null, 2) + '\n');
  const draw = xorshift(1000 + seed);
  return Array.from({ length: 32 }, () => 3 + (draw() % (s.vocab - 3)));
}
