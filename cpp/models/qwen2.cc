// Qwen 2 / 2.5: Llama layout with biases on q/k/v (never on o_proj).
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

std::unique_ptr<Model> load_qwen2(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec;
  spec.qkv_bias = true;
  spec.o_bias = false;
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
