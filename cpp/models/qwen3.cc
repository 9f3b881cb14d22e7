// Qwen 3: per-head RMSNorm of q and k before rope, explicit head_dim (may differ from
// hidden / heads); attention_bias puts biases on q/k/v/o.
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

std::unique_ptr<Model> load_qwen3(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec;
  spec.qkv_bias = spec.o_bias = cfg.attention_bias;
  spec.qk_norm = true;
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
