// 4-bit decode speed on a Llama-3.2-1B-shaped random checkpoint (hidden 2048, 16 layers, 32/8
// heads, MLP 8192, vocab 128256, tied), quantized by our own tool: prefill a short prompt, then
// time single-token decode steps through a session. Prints tok/s and the fraction of the
// bandwidth bound (weight bytes per token / 65 GB/s). The bf16 and quantized checkpoints are
// generated once under --cache (about 3.2 GB).
// Usage: node scripts/bench/quant-decode.mjs [--bits 4] [--group-size 64] [--tokens 64] [--cache /tmp/mlxb-bench]
import { existsSync, mkdirSync, openSync, writeSync, closeSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { native } from '../../dist/native/index.js';
import { quantizeCheckpoint } from '../../dist/quantize/index.js';
import { encodeHeader } from '../../dist/quantize/safetensors_write.js';

const { values } = parseArgs({
  options: {
    bits: { type: 'string', default: '4' }, 'group-size': { type: 'string', default: '64' },
    tokens: { type: 'string', default: '64' }, prompt: { type: 'string', default: '16' },
    cache: { type: 'string', default: '/tmp/mlxb-bench' },
  },
});
const bits = Number(values.bits);
const groupSize = Number(values['group-size']);
const H = 2048, L = 16, NH = 32, NKV = 8, HD = 64, F = 8192, V = 128256;

function makeBf16(dir) {
  mkdirSync(dir, { recursive: true });
  const tensors = [['model.embed_tokens.weight', [V, H]], ['model.norm.weight', [H]]];
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}.`;
    tensors.push([`${p}input_layernorm.weight`, [H]], [`${p}post_attention_layernorm.weight`, [H]],
      [`${p}self_attn.q_proj.weight`, [NH * HD, H]], [`${p}self_attn.k_proj.weight`, [NKV * HD, H]],
      [`${p}self_attn.v_proj.weight`, [NKV * HD, H]], [`${p}self_attn.o_proj.weight`, [H, NH * HD]],
      [`${p}mlp.gate_proj.weight`, [F, H]], [`${p}mlp.up_proj.weight`, [F, H]], [`${p}mlp.down_proj.weight`, [H, F]]);
  }
  tensors.sort((a, b) => (a[0] < b[0] ? -1 : 1));
  const meta = tensors.map(([name, shape]) => ({ name, dtype: 'BF16', shape, nbytes: shape.reduce((x, y) => x * y, 1) * 2 }));
  const fd = openSync(join(dir, 'model.safetensors'), 'w');
  writeSync(fd, encodeHeader(meta, { format: 'pt' }));
  let s = 1;
  for (const t of meta) {
    const n = t.nbytes / 2;
    // Norms 1, weights uniform in +-0.03, as bfloat16 (float32 bits truncated).
    const a = new Uint16Array(n);
    if (t.shape.length === 1) a.fill(0x3f80);
    else {
      const f = new Float32Array(1);
      const u = new Uint32Array(f.buffer);
      for (let i = 0; i < n; i++) {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        f[0] = (s / 4294967296 - 0.5) * 0.06;
        a[i] = u[0] >>> 16;
      }
    }
    writeSync(fd, new Uint8Array(a.buffer));
  }
  closeSync(fd);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: H, intermediate_size: F, num_hidden_layers: L,
    num_attention_heads: NH, num_key_value_heads: NKV, head_dim: HD, vocab_size: V, max_position_embeddings: 131072,
    rms_norm_eps: 1e-5, tie_word_embeddings: true, torch_dtype: 'bfloat16', hidden_act: 'silu', bos_token_id: 128000, eos_token_id: 128001,
    rope_theta: 500000.0, rope_scaling: { rope_type: 'llama3', factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192 },
  }));
}

const bf16Dir = join(values.cache, 'llama1b-bf16');
const qDir = join(values.cache, `llama1b-q${bits}-g${groupSize}`);
if (!existsSync(join(bf16Dir, 'config.json'))) {
  console.log(`writing ${bf16Dir} ...`);
  makeBf16(bf16Dir);
}
if (!existsSync(join(qDir, 'config.json'))) {
  console.log(`quantizing into ${qDir} ...`);
  const t0 = Date.now();
  await quantizeCheckpoint(bf16Dir, qDir, { bits, groupSize });
  console.log(`quantized in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}
const model = await native().loadModel(qDir, { device: 'cpu', dtype: 'auto' });
const bytes = model.info().weightBytes;
const session = model.createSession(Number(values.prompt) + Number(values.tokens) + 8);
const prompt = Int32Array.from({ length: Number(values.prompt) }, (_, i) => 1000 + i);
let t0 = performance.now();
await session.forward(prompt, false);
const prefillMs = performance.now() - t0;
const steps = Number(values.tokens);
const times = [];
for (let i = 0; i < steps; i++) {
  t0 = performance.now();
  await session.forward(Int32Array.of(2000 + i), false);
  times.push(performance.now() - t0);
}
times.sort((a, b) => a - b);
const med = times[Math.floor(steps / 2)];
// Per decode token every weight is read once except the embedding rows (the tied head reads it whole).
console.log(`1B ${bits}-bit g${groupSize}: prefill ${prompt.length} tokens ${prefillMs.toFixed(0)} ms; decode median ${med.toFixed(1)} ms/token = ` +
  `${(1000 / med).toFixed(1)} tok/s (best ${(1000 / times[0]).toFixed(1)}); weights ${(bytes / 1e9).toFixed(2)} GB, ` +
  `bound at 65 GB/s ${(65e9 / bytes).toFixed(0)} tok/s (${((1000 / med) / (65e9 / bytes) * 100).toFixed(0)}%)`);
session.dispose();
model.dispose();
