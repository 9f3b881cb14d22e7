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

// Integer kernels for 4- and 8-bit weights (the decode path): each block of a row of x (64
// elements for 4-bit weights with groups >= 64, else 32) is quantized to int16 (d = max|x| /
// 32767, xq = rint(x / d); the same rounding for every row, so a row's result does not depend on
// the other rows), weight integers meet xq in vpmaddwd (exact int32 sums), and
// y = sum_g s_g * sum_blocks(d * sum(q * xq)) + b_g * sum_g(x), the bias term on the exact float
// sums of x. int16 keeps the activation error near 1e-5 of a block's largest value (int8, as
// llama.cpp's Q8 activations, was measured too coarse for the L2 bar on the oracle fixtures).
struct IntActs {
  // [M, K] int16. 4-bit: nibble order within each block (the block's even elements, then its odd
  // ones); 8-bit: natural order.
  const int16_t* q16 = nullptr;
  int64_t block = 32;
  const float* d = nullptr;      // [M, K / block]
  const float* gsum = nullptr;   // [M, K / group_size]
};
bool int_kernel_for(int bits);
int64_t int_block(int bits, int group_size);
// Quantizes x [M, K] into the buffers (sized by the caller).
void quantize_acts(const float* x, int64_t M, int64_t K, int group_size, int bits, int16_t* q16, float* d, float* gsum);
void kernel_avx2_int(const Args& a, const IntActs& acts, int64_t n0, int64_t n1);
// The same quantization with AVX2 (identical q16, d; gsum up to float summation order).
void quantize_acts_avx2(const float* x, int64_t M, int64_t K, int group_size, int bits, int16_t* q16, float* d,
                        float* gsum);

// 4-bit weights, groups a multiple of 64 (qmatmul_q4_avx2.cc): the int16 activations split into
// byte planes (xq = 256 * hi + lo), so weight nibbles meet them in vpmaddubsw without widening.
// Same exact int32 block sums as kernel_avx2_int, about half the instructions.
// Planes come in pairs of blocks (b, b + 1), 256 bytes per pair: [hi even b | hi even b + 1]
// [hi odd b | hi odd b + 1] [lo even b | lo even b + 1] [lo odd b | lo odd b + 1], 32 bytes per
// block and part, so the AVX-512 kernel reads two blocks per 64-byte vector and the AVX2 one a
// block per 32 bytes. An odd last block has its pair's second halves zeroed.
struct Q4Acts {
  const int8_t* planes = nullptr;  // [M][ceil(K / 128)][256], see q4_plane
  const float* d = nullptr;        // [M, K / 64]
  const float* gsum = nullptr;     // [M, K / group_size]
};
bool q4_kernel_for(int bits, int group_size);
// Bytes of the planes of M rows of K values.
inline int64_t q4_plane_bytes(int64_t M, int64_t K) { return M * ((K / 64 + 1) / 2) * 256; }
// Part (0 hi even, 1 hi odd, 2 lo even, 3 lo odd) of block b of row m: 32 bytes.
inline const int8_t* q4_plane(const Q4Acts& a, int64_t K, int64_t m, int64_t b, int part) {
  return a.planes + (m * ((K / 64 + 1) / 2) + b / 2) * 256 + part * 64 + (b & 1) * 32;
}
// q16 [M, K] from quantize_acts (4-bit, 64-element blocks) -> planes [q4_plane_bytes(M, K)].
void split_planes_avx2(const int16_t* q16, int64_t M, int64_t K, int8_t* planes);
void kernel_avx2_q4(const Args& a, const Q4Acts& acts, int64_t n0, int64_t n1);
// The same sums with AVX-512 VNNI (qmatmul_q4_avx512.cc; float32 accumulation over 16 lanes).
void kernel_avx512_q4(const Args& a, const Q4Acts& acts, int64_t n0, int64_t n1);

}  // namespace mlxb::cpu::qmm
