// The few-row GEMM of the batched decode step (matmul_rows.cu).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace mlxb::cuda {

constexpr int64_t kGemvMaxRows = 8;   // matmul.cu's GEMV takes up to this many rows of x
constexpr int64_t kRowsGemmMax = 32;  // rows_gemm takes kGemvMaxRows + 1 .. this many

// y = x · w^T (+ bias) for 16-bit x, w, y of one dtype, or with `act` the gated form: w = [gate; up]
// ([2F, K]) and y [M, F] = act(round(x gate^T)) * round(x up^T). On when MLXB_ROWS_GEMM=1 (sm_90+,
// K a multiple of 64, 16-byte aligned tensors, not the LM head). False: not taken (the caller runs
// its other path).
bool rows_gemm(const Tensor& x, const Tensor& w, const Tensor* bias, const Activation* act, Tensor& y);
// Overrides MLXB_ROWS_GEMM for the rest of the process (cuda_ops_check --rows compares both paths).
void set_rows_gemm_enabled(bool on);

}  // namespace mlxb::cuda
