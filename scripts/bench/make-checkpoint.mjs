// Writes a random-weight Llama-3-shaped checkpoint (config.json + safetensors, sharded with an
// index above 4 GB) for benchmarks. Pure Node, deterministic for a given --seed: weights are
// drawn from a fixed table of normal values (std 0.02) indexed by a xorshift stream; norm
// weights are 1. Not a fixture: never commit its output.
//
// node scripts/bench/make-checkpoint.mjs --shape tiny|1b|8b [--dtype bf16|f16|f32] [--seed 1] [--shard-gb 4] --out DIR
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const SHAPES = {
  tiny: { hidden: 256, layers: 4, heads: 4, kvHeads: 2, mlp: 768, vocab: 128256, tied: true, ropeFactor: 32 },
  '1b': { hidden: 2048, layers: 16, heads: 32, kvHeads: 8, mlp: 8192, vocab: 128256, tied: true, ropeFactor: 32 },
  '8b': { hidden: 4096, layers: 32, heads: 32, kvHeads: 8, mlp: 14336, vocab: 128256, tied: false, ropeFactor: 8 },
};
const DTYPES = { bf16: ['BF16', 2, 'bfloat16'], f16: ['F16', 2, 'float16'], f32: ['F32', 4, 'float32'] };

const { values } = parseArgs({
  options: {
    shape: { type: 'string', default: 'tiny' },
    dtype: { type: 'string', default: 'bf16' },
    seed: { type: 'string', default: '1' },
    out: { type: 'string' },
    'shard-gb': { type: 'string', default: '4' },
  },
});
const SHARD_BYTES = Number(values['shard-gb']) * 1024 ** 3;
const shape = SHAPES[values.shape];
const dt = DTYPES[values.dtype];
if (!shape || !dt || !values.out) {
  console.error('usage: make-checkpoint.mjs --shape tiny|1b|8b [--dtype bf16|f16|f32] [--seed N] --out DIR');
  process.exit(2);
}
const [stDtype, elemBytes, torchDtype] = dt;
const headDim = shape.hidden / shape.heads;

// ---- tensors in Hugging Face Llama naming
const tensors = [['model.embed_tokens.weight', [shape.vocab, shape.hidden], 'normal']];
for (let i = 0; i < shape.layers; i++) {
  const p = `model.layers.${i}.`;
  tensors.push(
    [p + 'input_layernorm.weight', [shape.hidden], 'ones'],
    [p + 'self_attn.q_proj.weight', [shape.heads * headDim, shape.hidden], 'normal'],
    [p + 'self_attn.k_proj.weight', [shape.kvHeads * headDim, shape.hidden], 'normal'],
    [p + 'self_attn.v_proj.weight', [shape.kvHeads * headDim, shape.hidden], 'normal'],
    [p + 'self_attn.o_proj.weight', [shape.hidden, shape.heads * headDim], 'normal'],
    [p + 'post_attention_layernorm.weight', [shape.hidden], 'ones'],
    [p + 'mlp.gate_proj.weight', [shape.mlp, shape.hidden], 'normal'],
    [p + 'mlp.up_proj.weight', [shape.mlp, shape.hidden], 'normal'],
    [p + 'mlp.down_proj.weight', [shape.hidden, shape.mlp], 'normal'],
  );
}
tensors.push(['model.norm.weight', [shape.hidden], 'ones']);
if (!shape.tied) tensors.push(['lm_head.weight', [shape.vocab, shape.hidden], 'normal']);

// ---- values: a 65536-entry table of N(0, 0.02) in the target encoding
let state = (Number(values.seed) * 2654435761) >>> 0 || 1;
function next() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state;
}
const table = new Float32Array(65536);
for (let i = 0; i < 65536; i += 2) {
  const u1 = (next() + 1) / 4294967297, u2 = next() / 4294967296;
  const r = 0.02 * Math.sqrt(-2 * Math.log(u1));
  table[i] = r * Math.cos(2 * Math.PI * u2);
  table[i + 1] = r * Math.sin(2 * Math.PI * u2);
}
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function bf16(x) { f32[0] = x; const u = u32[0]; return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff; }
function f16(x) { // normal range only (|x| < 1: the table and ones)
  f32[0] = x; const u = u32[0];
  const sign = (u >>> 16) & 0x8000, e = ((u >>> 23) & 0xff) - 112, m = u & 0x7fffff;
  if (e <= 0) return sign | (Math.round((m | 0x800000) / 2 ** (14 - e)) & 0x3ff);
  const r = (e << 10) | (m >>> 13), rem = m & 0x1fff;
  return sign | (rem > 0x1000 || (rem === 0x1000 && (r & 1)) ? r + 1 : r);
}
const enc16 = stDtype === 'BF16' ? bf16 : f16;
const table16 = new Uint16Array(65536).map((_, i) => enc16(table[i]));
const one16 = enc16(1);

function fill(buf, count, kind) {
  if (elemBytes === 2) {
    const a = new Uint16Array(buf.buffer, buf.byteOffset, count);
    if (kind === 'ones') { a.fill(one16); return; }
    let i = 0;
    for (; i + 1 < count; i += 2) { const r = next(); a[i] = table16[r & 0xffff]; a[i + 1] = table16[r >>> 16]; }
    if (i < count) a[i] = table16[next() & 0xffff];
  } else {
    const a = new Float32Array(buf.buffer, buf.byteOffset, count);
    if (kind === 'ones') { a.fill(1); return; }
    let i = 0;
    for (; i + 1 < count; i += 2) { const r = next(); a[i] = table[r & 0xffff]; a[i + 1] = table[r >>> 16]; }
    if (i < count) a[i] = table[next() & 0xffff];
  }
}

// ---- shards: greedily fill up to SHARD_BYTES each
const shards = [];
let cur = null;
for (const [name, dims, kind] of tensors) {
  const bytes = dims.reduce((a, b) => a * b, 1) * elemBytes;
  if (!cur || (cur.bytes > 0 && cur.bytes + bytes > SHARD_BYTES)) { cur = { tensors: [], bytes: 0 }; shards.push(cur); }
  cur.tensors.push({ name, dims, kind, begin: cur.bytes, end: cur.bytes + bytes });
  cur.bytes += bytes;
}
mkdirSync(values.out, { recursive: true });
const total = shards.reduce((a, s) => a + s.bytes, 0);
const names = shards.length === 1 ? ['model.safetensors']
  : shards.map((_, i) => `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`);
const weightMap = {};
const CHUNK = 64 * 1024 * 1024;
const chunk = Buffer.alloc(CHUNK);
const t0 = Date.now();
shards.forEach((sh, si) => {
  const header = { __metadata__: { format: 'pt' } };
  for (const t of sh.tensors) {
    header[t.name] = { dtype: stDtype, shape: t.dims, data_offsets: [t.begin, t.end] };
    weightMap[t.name] = names[si];
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const fd = openSync(join(values.out, names[si]), 'w');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  writeSync(fd, len);
  writeSync(fd, json);
  for (const t of sh.tensors) {
    let left = (t.end - t.begin) / elemBytes;
    while (left > 0) {
      const n = Math.min(left, CHUNK / elemBytes);
      fill(chunk, n, t.kind);
      writeSync(fd, chunk, 0, n * elemBytes);
      left -= n;
    }
  }
  closeSync(fd);
});
if (shards.length > 1)
  writeFileSync(join(values.out, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));

const config = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: shape.hidden,
  intermediate_size: shape.mlp,
  num_hidden_layers: shape.layers,
  num_attention_heads: shape.heads,
  num_key_value_heads: shape.kvHeads,
  head_dim: headDim,
  vocab_size: shape.vocab,
  max_position_embeddings: 131072,
  rms_norm_eps: 1e-5,
  rope_theta: 500000.0,
  rope_scaling: { rope_type: 'llama3', factor: shape.ropeFactor, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192 },
  hidden_act: 'silu',
  attention_bias: false,
  mlp_bias: false,
  tie_word_embeddings: shape.tied,
  bos_token_id: 128000,
  eos_token_id: 128001,
  torch_dtype: torchDtype,
};
writeFileSync(join(values.out, 'config.json'), JSON.stringify(config, null, 2) + '\n');
console.log(`wrote ${values.shape} ${values.dtype} checkpoint: ${(total / 1e9).toFixed(2)} GB in ${shards.length} file(s) to ${values.out} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
