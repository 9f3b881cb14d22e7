// out[r] = index of the first maximum of row r of x [R, N] (float dtypes), so that greedy
// decoding copies one int32 per row to the host instead of the logits. Each element becomes a
// 64-bit key (order-preserving bits of the value, then the complemented index so that the lower
// index wins ties); blocks reduce their part of a row and atomicMax the row's key; the last block
// of a row (a counter) writes the index. NaN is skipped; -0 counts as +0.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kPerBlock = 8192;  // elements per block

__device__ __forceinline__ unsigned long long make_key(float f, int64_t i) {
  if (f == 0.0f) f = 0.0f;
  unsigned u = __float_as_uint(f);
  unsigned ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | static_cast<unsigned>(~static_cast<unsigned>(i));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const T* __restrict__ x, int64_t n, unsigned long long* keys,
                                                          unsigned* done, int32_t* out) {
  __shared__ unsigned long long warp_best[kThreads / 32];
  __shared__ bool last;
  const int64_t row = blockIdx.y;
  const T* xr = x + row * n;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kPerBlock, b1 = min(n, b0 + kPerBlock);
  unsigned long long best = 0;
#pragma unroll 8
  for (int64_t i = b0 + threadIdx.x; i < b1; i += kThreads) {
    float f = to_f32(xr[i]);
    if (f == f) {
      unsigned long long k = make_key(f, i);
      best = k > best ? k : best;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) best = warp_best[w] > best ? warp_best[w] : best;
    if (best) atomicMax(&keys[row], best);
    __threadfence();
    last = atomicAdd(&done[row], 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    unsigned long long k = atomicAdd(&keys[row], 0ull);
    out[row] = k ? static_cast<int32_t>(~static_cast<unsigned>(k & 0xffffffffu)) : 0;
  }
}

}  // namespace

void CudaBackend::argmax(const Tensor& x, Tensor& out) {
  check_device(x, "argmax", "x"); check_device(out, "argmax", "out");
  check_float(x, "argmax", "x"); check_contiguous(x, "argmax", "x"); check_contiguous(out, "argmax", "out");
  if (out.dtype() != DType::I32) fail(ErrorCode::kInvalidArgument, "cuda argmax: out must be int32");
  if (x.ndim() < 1) fail(ErrorCode::kInvalidArgument, "cuda argmax: x must have a last dimension");
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (n == 0 || out.numel() != rows) fail(ErrorCode::kInvalidArgument, "cuda argmax: out must hold one index per row: " + out.describe());
  if (n > INT32_MAX || rows > 65535) fail(ErrorCode::kUnsupported, "cuda argmax: rows too long or too many");
  const int64_t ws = rows * static_cast<int64_t>(sizeof(unsigned long long) + sizeof(unsigned));
  Scratch scratch(ws, "the argmax workspace");
  auto* keys = scratch.as<unsigned long long>();
  auto* done = reinterpret_cast<unsigned*>(keys + rows);
  MLXB_CUDA_OK(cudaMemsetAsync(scratch.p, 0, static_cast<size_t>(ws), stream()));
  dim3 grid(static_cast<unsigned>(ceil_div(n, kPerBlock)), static_cast<unsigned>(rows));
  MLXB_FLOAT_SWITCH(x.dtype(), T,
      argmax_kernel<T><<<grid, kThreads, 0, stream()>>>(x.ptr<T>(), n, keys, done, out.ptr<int32_t>()));
  MLXB_CUDA_LAUNCHED("argmax");
}

}  // namespace mlxb::cuda
