// The quantized GEMV (decode, M <= 8) as a template over the bit width; qgemv_*.cu instantiate
// it per width so that the widths compile in parallel.
//
// Bandwidth-bound layout: a warp owns kRows consecutive weight rows; lane l takes chunks l,
// l + 32, ... of 32 values (`bits` words, one 16-byte load for 4 bits), kUnroll chunks loaded
// before any is used. Each chunk is unpacked to exact integer floats once per weight row and
// applied to every row of x: acc += scale * sum(q * x) + bias * sum(x) (the group's scale and
// bias are read once per chunk, sum(x) once per chunk for all weight rows). x is read through the
// read-only cache in float32 (converted in registers). Never dequantizes anything to memory.
#pragma once
#include "backend/cuda/qmm.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda::qmm {

constexpr int kGemvWarps = 4;  // warps per block
constexpr int kRows = 2;       // weight rows per warp
constexpr int kUnroll = 2;     // chunks in flight per lane and row

template <int B, int MM, typename TX>
__global__ void __launch_bounds__(kGemvWarps * 32) qgemv_kernel(Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5)) * kRows;
  if (row0 >= p.N) return;
  const TX* x = static_cast<const TX*>(p.x);
  const int64_t chunks = p.K / 32, wpr = p.K / 32 * B, groups = p.K / p.group_size;
  const int chunks_per_group = p.group_size / 32;
  bool row_ok[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) row_ok[r] = row0 + r < p.N;
  float acc[MM][kRows];
#pragma unroll
  for (int m = 0; m < MM; ++m)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[m][r] = 0.0f;

  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint32_t w[kUnroll][kRows][B];
    float s[kUnroll][kRows], b[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      const int64_t g = c / chunks_per_group;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (c < chunks && row_ok[r]) {
          load_chunk<B>(p.packed + (row0 + r) * wpr + c * B, w[u][r]);
          s[u][r] = load_f(p.scales, p.sb_code, (row0 + r) * groups + g);
          b[u][r] = load_f(p.biases, p.sb_code, (row0 + r) * groups + g);
        } else {
#pragma unroll
          for (int i = 0; i < B; ++i) w[u][r][i] = 0;
          s[u][r] = 0.0f;
          b[u][r] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      float q[kRows][32];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack_chunk<B>(w[u][r], q[r]);
#pragma unroll
      for (int m = 0; m < MM; ++m) {
        if (m < p.M) {
          float xv[32];
          load32(x + m * p.K + c * 32, xv);
          float xs = 0.0f;
          float dot[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) dot[r] = 0.0f;
#pragma unroll
          for (int j = 0; j < 32; ++j) {
            xs += xv[j];
#pragma unroll
            for (int r = 0; r < kRows; ++r) dot[r] = fmaf(q[r][j], xv[j], dot[r]);
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[m][r] = fmaf(s[u][r], dot[r], fmaf(b[u][r], xs, acc[m][r]));
        }
      }
    }
  }
  TX* y = static_cast<TX*>(p.y);
#pragma unroll
  for (int m = 0; m < MM; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = warp_sum(acc[m][r]);
      if (lane == 0 && m < p.M && row_ok[r]) {
        if (p.bias) v += load_f(p.bias, p.bias_code, row0 + r);
        y[m * p.N + row0 + r] = from_f32<TX>(v);
      }
    }
  }
}

template <int B, typename TX>
void qgemv_typed(const Params& p) {
  const int64_t warps = ceil_div(p.N, kRows);
  const unsigned grid = static_cast<unsigned>(ceil_div(warps, kGemvWarps));
  const unsigned threads = kGemvWarps * 32;
  if (p.M == 1) qgemv_kernel<B, 1, TX><<<grid, threads, 0, stream()>>>(p);
  else if (p.M == 2) qgemv_kernel<B, 2, TX><<<grid, threads, 0, stream()>>>(p);
  else if (p.M <= 4) qgemv_kernel<B, 4, TX><<<grid, threads, 0, stream()>>>(p);
  else qgemv_kernel<B, 8, TX><<<grid, threads, 0, stream()>>>(p);
  MLXB_CUDA_LAUNCHED("qmatmul (gemv)");
}

template <int B>
void qgemv_launch(const Params& p, DType xd) {
  MLXB_FLOAT_SWITCH(xd, TX, qgemv_typed<B, TX>(p));
}

}  // namespace mlxb::cuda::qmm
