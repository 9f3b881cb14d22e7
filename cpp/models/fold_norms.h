// RMSNorm weights folded into the projections after them, for CUDA steps of several rows
// (opt-in, MLXB_FOLD_NORMS=1). With g the input norm's weight, rms_norm(x, g) · W^T equals
// s · (x · (W diag g)^T) for s = 1 / rms(x), so a folded layer projects the residual itself and
// the scale moves into the kernels after the projections (ops::rms_scaled_rope_kv_write,
// ops::rms_scaled_gated_act), while o and down add into the residual in their GEMM
// (ops::matmul_accumulate). No norm kernel is left between the GEMMs of a layer. The folded
// weights are copies (W diag g rounded once to the weight dtype); the unfolded ones stay for every
// other path. Their rounding differs from rounding rms_norm's output, so logits move by bf16 noise.
#pragma once
#include <string>
#include <vector>

#include "models/decoder.h"

namespace mlxb {

struct FoldedLayer {
  Linear qkv;      // [q; k; v] · diag(input_norm)
  Linear gate_up;  // [gate; up] · diag(post_attn_norm)
};

// MLXB_FOLD_NORMS=1 (read when a model loads).
bool fold_norms_requested();
// Empty when the layers can be folded; else why not (dense 16-bit CUDA weights without biases,
// fused q/k/v and gate/up, no q/k norms, no sandwich or (1 + w) norms).
std::string fold_norms_unsupported(const std::vector<LayerWeights>& layers, const DecoderSpec& spec, Device device, DType act);
// The folded weights of every layer, made on the layers' device (one GEMM per weight with a
// diagonal matrix: each product is exact in float32 and rounded once).
std::vector<FoldedLayer> fold_norms(const std::vector<LayerWeights>& layers);

}  // namespace mlxb
