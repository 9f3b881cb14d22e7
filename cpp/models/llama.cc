// Llama (incl. Llama 3 rope scaling): the reference layout. attention_bias puts biases on
// q/k/v/o, mlp_bias on the MLP.
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

std::unique_ptr<Model> load_llama(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec;
  spec.qkv_bias = spec.o_bias = cfg.attention_bias;
  spec.mlp_bias = cfg.mlp_bias;
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
