// Mistral: Llama without biases; sliding-window attention on every layer when sliding_window is
// set (the window itself comes from the config's layer_types).
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

std::unique_ptr<Model> load_mistral(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec;  // transformers' Mistral has no attention or MLP biases
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
