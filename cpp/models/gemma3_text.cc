// Gemma 3 (text): Gemma 2's graph plus per-head (1 + w) RMSNorm of q and k; sliding layers use
// their own rope (rope_local: base 10k, unscaled) and global layers the scaled one.
#include "models/decoder.h"
#include "models/registry.h"

namespace mlxb {

DecoderSpec gemma_spec(const ModelConfig& cfg);  // gemma2.cc

std::unique_ptr<Model> load_gemma3_text(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  DecoderSpec spec = gemma_spec(cfg);
  spec.qk_norm = true;
  return build_decoder(cfg, spec, store, options);
}

}  // namespace mlxb
