// Fused projections of MLX affine-quantized layers (the quantized side of fuse_projections in
// blocks.h, called from fuse.cc): q/k/v (or gate/up) with the same bits, group size, input size,
// scale dtype, device and bias presence become one QuantWeight whose packed words, scales and
// biases are the parts' rows stacked (a row of the format does not depend on the other rows, so
// the fused layer computes exactly the parts' outputs, concatenated). The parts become row views.
#pragma once
#include <vector>

#include "models/weights.h"

namespace mlxb {

// The fused layer, or an undefined Linear (parts untouched) when the parts cannot be fused.
Linear fuse_quantized(const std::vector<Linear*>& parts);

}  // namespace mlxb
