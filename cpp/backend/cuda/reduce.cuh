// Block-wide float reductions for row kernels (one block per row, blockDim a multiple of 32, at
// most 1024). Every thread gets the result.
#pragma once
#include <cfloat>

namespace mlxb::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float part[32];
  __shared__ float result;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `part` may still be read by a previous reduction
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? part[lane] : (kMax ? -FLT_MAX : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

}  // namespace mlxb::cuda
