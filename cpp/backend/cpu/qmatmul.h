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

// Float kernels: x in float32, weights dequantized to float32 in registers (every bits, every
// group size). The scalar one is the reference.
void kernel_scalar(const Args& a, int64_t n0, int64_t n1);
void kernel_avx2(const Args& a, int64_t n0, int64_t n1);
void kernel_avx512(const Args& a, int64_t n0, int64_t n1);

// Integer kernels for 4- and 8-bit weights (the decode path): each 32-element block of a row of
// x is quantized to int8 (d = max|x| / 127, xq = rint(x / d), the same rounding for every row,
// so a row's result does not depend on the other rows), the weight integers are multiplied with
// xq in integer SIMD, and y = sum_g s_g * sum_blocks(d * sum(q * xq)) + b_g * sum_g(x), where the
// bias term uses the exact float32 sums of x.
struct IntActs {
  // [M, K] int8, 4-bit only, in nibble order within each span of `span` elements (64 when the
  // group size allows: all even elements of the span, then all odd ones; else 32).
  const int8_t* q8 = nullptr;
  int64_t span = 32;
  const float* dvec = nullptr;   // span 64: [M, K / 64, 8] = the two blocks' d, each 4 times
  const int16_t* q16 = nullptr;  // [M, K] natural order (8-bit)
  const float* d = nullptr;      // [M, K / 32]
  const float* gsum = nullptr;   // [M, K / group_size]
};
bool int_kernel_for(int bits);
// Quantizes x [M, K] into the buffers (sized by the caller).
void quantize_acts(const float* x, int64_t M, int64_t K, int group_size, int bits, int64_t span, int8_t* q8, int16_t* q16,
                   float* d, float* dvec, float* gsum);
void kernel_avx2_int(const Args& a, const IntActs& acts, int64_t n0, int64_t n1);

}  // namespace mlxb::cpu::qmm
