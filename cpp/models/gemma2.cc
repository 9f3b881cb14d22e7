// Gemma 2: (1 + w) RMSNorms in a sandwich around attention and MLP, embeddings scaled by
// sqrt(hidden), attention scale query_pre_attn_scalar^-0.5, attention and final logit
// soft-capping, alternating sliding / full layers (from layer_types).
#include <cmath>

#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

DecoderSpec gemma_spec(const ModelConfig& cfg) {
  DecoderSpec spec;
  spec.norm_add_one = true;
  spec.scale_embeddings = true;
  spec.sandwich_norms = true;
  spec.qkv_bias = spec.o_bias = cfg.attention_bias;
  const double scalar = cfg.query_pre_attn_scalar > 0.0 ? cfg.query_pre_attn_scalar : static_cast<double>(cfg.head_dim);
  spec.attn_scale = static_cast<float>(std::pow(scalar, -0.5));
  spec.attn_softcap = static_cast<float>(cfg.attn_logit_softcapping);
  spec.final_softcap = static_cast<float>(cfg.final_logit_softcapping);
  return spec;
}

std::unique_ptr<Model> load_gemma2(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  return build_decoder(cfg, gemma_spec(cfg), store, options);
}

}  // namespace mlxb
