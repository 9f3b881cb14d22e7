// Phi-3 / Phi-4-mini: fused qkv_proj ([q; k; v] rows) and gate_up_proj ([gate; up] rows), split
// into row views at load; partial rotary through partial_rotary_factor. No biases.
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

namespace {

void load_phi3_layer(WeightLoader& wl, const DecoderSpec&, int64_t i, LayerWeights& w) {
  const ModelConfig& c = wl.config();
  const std::string p = layer_prefix(i);
  const int64_t h = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  const int64_t f = c.intermediate_size;
  w.input_norm = wl.tensor(p + "input_layernorm.weight", {h});
  const Linear qkv = load_linear(wl, p + "self_attn.qkv_proj", qd + 2 * kvd, h, false);
  w.attn.q = linear_rows(qkv, 0, qd);
  w.attn.k = linear_rows(qkv, qd, qd + kvd);
  w.attn.v = linear_rows(qkv, qd + kvd, qd + 2 * kvd);
  w.attn.o = load_linear(wl, p + "self_attn.o_proj", h, qd, false);
  w.post_attn_norm = wl.tensor(p + "post_attention_layernorm.weight", {h});
  const Linear gate_up = load_linear(wl, p + "mlp.gate_up_proj", 2 * f, h, false);
  w.mlp.gate = linear_rows(gate_up, 0, f);
  w.mlp.up = linear_rows(gate_up, f, 2 * f);
  w.mlp.down = load_linear(wl, p + "mlp.down_proj", h, f, false);
}

}  // namespace

std::unique_ptr<Model> load_phi3(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec;
  spec.load_layer = load_phi3_layer;
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
