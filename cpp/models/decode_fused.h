// The one-token decoder layers with fused projections (ops.h: norm_qkv_rope, matmul_add,
// norm_gated_matmul): per layer, the input RMSNorm runs inside the q/k/v projection together
// with rope and the cache writes, the residual adds inside the o and down projections, and the
// post-attention RMSNorm inside the gate/up projection. Five launches per layer (with the
// attention) instead of nine; every value is bit-identical to the unfused path (the ops promise
// it), so eager steps, recorded steps and MLXB_CUDA_FUSED=0 agree exactly. MLX-quantized
// projections take the quantized forms (qmatmul_add, norm_qmatmul, norm_qgated_matmul; on CUDA the
// residual adds run inside the 4-bit GEMV, the norms by default still as rms_norm launches, see
// qgemv_fused.cu) and rope + cache writes as attention_block does them: eight launches per layer,
// as many as the unfused loop (its add_rms_norm becomes rms_norm, the add moves into the GEMV).
#pragma once
#include <vector>

#include "models/blocks.h"
#include "models/decoder.h"

namespace mlxb {

// Whether the fused path covers these layers: fused [q; k; v] and [gate; up] weights, o and down
// (each dense or quantized), no q/k norms, no sandwich norms, a 2-byte activation dtype on CUDA, and
// MLXB_CUDA_FUSED is not "0" (read when the model loads).
bool fused_decode_supported(const std::vector<LayerWeights>& layers, const DecoderSpec& spec, Device device, DType act);

// Runs every layer for one token: x [1, hidden] is the residual stream (embedding in, the sum
// after the last layer out, not normalised).
void fused_decode_layers(Tensor& x, const std::vector<LayerWeights>& layers, const std::vector<AttentionParams>& params,
                         CacheSet& caches, const StepInputs& step, float norm_eps, bool norm_add_one, Activation act);

}  // namespace mlxb
