// Internal to the CPU backend: the quantized matmul kernels behind CpuBackend::qmatmul.
// y[M, N] = x[M, K] · dequant(w)[N, K]^T, float32 activations, float32 accumulation, without
// dequantizing the whole matrix: each kernel unpacks one group of one weight row at a time into
// registers and reuses it for a tile of up to kRowTile rows of x (decode: M = 1; prefill: M large).
// A kernel computes output columns [n0, n1) for every row of x; qmatmul.cc splits N across threads.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace mlxb::cpu::qmm {

constexpr int64_t kRowTile = 8;

struct Args {
  const float* x = nullptr;   // [M, K], prepared by prepare_x() for the chosen kernel
  const QuantWeight* w = nullptr;
  float* y = nullptr;         // [M, N]
  int64_t M = 0, N = 0, K = 0;
};

// 4-bit SIMD kernels read x with each 32-element block reordered to [even k..., odd k...] (the
// order nibbles come out of a byte); other widths read x as is.
bool wants_nibble_order(int bits);
void to_nibble_order(const float* x, int64_t K, float* out);

// Whether a SIMD kernel exists for these bits; every kernel handles every group size.
void kernel_scalar(const Args& a, int64_t n0, int64_t n1);
void kernel_avx2(const Args& a, int64_t n0, int64_t n1);
void kernel_avx512(const Args& a, int64_t n0, int64_t n1);

}  // namespace mlxb::cpu::qmm
