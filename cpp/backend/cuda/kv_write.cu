// cache[h, slots[t], :] = src[t, h, :] for src [T, H, D] (contiguous) and cache [H, S, D] whose
// dim-0 stride may exceed S*D (a view of a larger buffer). Slots outside [0, S) are skipped.
// Converts between float dtypes (f32 activations into a bf16 cache, for example).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename TS, typename TC>
static __global__ void kv_write_kernel(const TS* src, const int32_t* slots, TC* cache, int64_t t_count, int64_t heads,
                                       int64_t dim, int64_t s_count, int64_t head_stride) {
  int64_t row = blockIdx.x;  // t * heads + h
  int64_t t = row / heads, h = row % heads;
  int64_t slot = slots[t];
  if (slot < 0 || slot >= s_count) return;
  const TS* s = src + row * dim;
  TC* d = cache + h * head_stride + slot * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) d[i] = from_f32<TC>(to_f32(s[i]));
}

void CudaBackend::kv_write(const Tensor& src, const Tensor& slots, Tensor& cache) {
  check_device(src, "kv_write", "src"); check_device(slots, "kv_write", "slots"); check_device(cache, "kv_write", "cache");
  check_float(src, "kv_write", "src"); check_float(cache, "kv_write", "cache");
  check_contiguous(src, "kv_write", "src"); check_contiguous(slots, "kv_write", "slots");
  if (slots.dtype() != DType::I32) fail(ErrorCode::kInvalidArgument, "cuda kv_write: slots must be int32");
  if (src.ndim() != 3 || cache.ndim() != 3 || src.dim(1) != cache.dim(0) || src.dim(2) != cache.dim(2) ||
      slots.numel() != src.dim(0) || cache.stride(2) != 1 || cache.stride(1) != cache.dim(2))
    fail(ErrorCode::kInvalidArgument, "cuda kv_write: src [T,H,D] and cache [H,S,D] do not match: " + src.describe() + " -> " +
                                          cache.describe());
  int64_t rows = src.dim(0) * src.dim(1);
  if (rows == 0) return;
  int threads = src.dim(2) >= 256 ? 256 : 128;
  MLXB_FLOAT_SWITCH(src.dtype(), TS, MLXB_FLOAT_SWITCH(cache.dtype(), TC,
      kv_write_kernel<TS, TC><<<static_cast<unsigned>(rows), threads, 0, stream()>>>(
          src.ptr<TS>(), slots.ptr<int32_t>(), cache.ptr<TC>(), src.dim(0), src.dim(1), src.dim(2), cache.dim(1), cache.stride(0))));
  MLXB_CUDA_LAUNCHED("kv_write");
}

}  // namespace mlxb::cuda
