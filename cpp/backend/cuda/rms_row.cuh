// The inverse root mean square of one row as rms_norm.cu computes it, for kernels that normalise
// a row themselves (gemv_fused.cu, qgemv_tcp.cu, qgemv_tma.cu) and must give rms_norm's bits: its launch of vt
// threads (512 for rows >= 2048, 256 for >= 512, else 128) is emulated by whatever block runs
// this (blockDim a multiple of 32): virtual thread j sums elements j, j + vt, ... with fmas in
// that order, then each warp's butterfly, then the butterfly over the warp sums (block_sum).
#pragma once
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

// at(i): element i of the row as float. Every thread of the block must call it; every thread
// gets the result.
template <typename F>
__device__ __forceinline__ float rms_inv_row(F at, int64_t h, float eps) {
  __shared__ float part[32];
  const int tid = threadIdx.x, lane = tid & 31, bd = blockDim.x;
  const int vt = h >= 2048 ? 512 : (h >= 512 ? 256 : 128);
  for (int r = 0; r * bd < vt; ++r) {
    const int j = tid + r * bd;
    float ss = 0.0f;
    if (j < vt)
      for (int64_t i = j; i < h; i += vt) {
        const float v = at(i);
        ss = __fmaf_rn(v, v, ss);
      }
    ss = warp_sum(ss);
    if (lane == 0 && j < vt) part[j >> 5] = ss;
  }
  __syncthreads();
  float total = lane < (vt >> 5) ? part[lane] : 0.0f;
  total = warp_sum(total);
  return rsqrtf(total / static_cast<float>(h) + eps);
}

// rms_norm's per-element float32 expression for 8 packed values x of T (bf16 / f16) with their
// norm weights w: round(x * inv * (add_one ? 1 + w : w)).
template <typename T>
__device__ __forceinline__ uint4 rms_scale8(uint4 xu, uint4 wu, float inv, bool add_one) {
  uint4 yu;
  const T* xe = reinterpret_cast<const T*>(&xu);
  const T* we = reinterpret_cast<const T*>(&wu);
  T* ye = reinterpret_cast<T*>(&yu);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float v = to_f32(xe[e]), wv = to_f32(we[e]);
    ye[e] = from_f32<T>(v * inv * (add_one ? 1.0f + wv : wv));
  }
  return yu;
}

}  // namespace mlxb::cuda
