// The CPU's decode layout for dense weights (weight_layout.cc): bf16 [N, K] weights, on a CPU
// whose matmuls take the bf16-dot path (matmul_dispatch.cc), are stored as blocks of four rows,
// a tensor of shape [N / 4, K / 32, 4, 32]: element (row, col) at
// ((row / 4) * (K / 32) + col / 32) * 128 + (row % 4) * 32 + col % 32. The four rows a GEMV step
// reads are then one sequential stream of memory instead of four, which the hardware
// prefetcher follows (1B-shaped decode matmuls on the 2-core Zen 4 VM: ~5-7% less time per
// token). The values and every result are those of the row-major weight. MLXB_CPU_WEIGHT_LAYOUT=rows
// (read when a model loads) keeps the row-major layout.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mlxb::cpu {

// Whether w is a weight in the four-row block layout.
bool is_blocked_weight(const Tensor& w);
// Row `row` of a blocked weight as float32 (k = w.dim(1) * 32 elements into dst).
void blocked_row_to_f32(const Tensor& w, int64_t row, float* dst);

}  // namespace mlxb::cpu
