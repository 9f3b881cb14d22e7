// kv_write: cache[h, slots[t], :] = src[t, h, :] for src [T, H, D] (f32/bf16/f16) and a cache
// view [H, S, D] (f32/bf16/f16, contiguous rows, dim-0 stride >= S*D), converting dtypes with
// round-to-nearest-even. A slot outside [0, S) is an InvalidArgument error, checked before any
// write.
#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::kv_write(const Tensor& src, const Tensor& slots, Tensor& cache) {
  const char* op = "kv_write";
  check_host(op, "src", src);
  check_host(op, "slots", slots);
  check_host(op, "cache", cache, false);
  check_float(op, "src", src);
  check_float(op, "cache", cache);
  check_dtype(op, "slots", slots, DType::I32);
  MLXB_ARG(src.ndim() == 3, op, "src must be [T, H, D], got " + src.describe());
  MLXB_ARG(cache.ndim() == 3, op, "cache must be [H, S, D], got " + cache.describe());
  const int64_t t = src.dim(0), h = src.dim(1), d = src.dim(2), s = cache.dim(1);
  MLXB_ARG(cache.dim(0) == h && cache.dim(2) == d, op, "cache heads/dim differ from src: " + cache.describe() + " vs " + src.describe());
  MLXB_ARG(cache.stride(2) == 1 && cache.stride(1) == d && cache.stride(0) >= s * d, op,
          "cache must have contiguous rows and dim-0 stride >= S*D");
  MLXB_ARG(slots.numel() == t, op, "slots must have T entries, got " + slots.describe());
  const int32_t* sl = slots.ptr<int32_t>();
  for (int64_t i = 0; i < t; ++i)
    MLXB_ARG(sl[i] >= 0 && sl[i] < s, op, "slot " + std::to_string(sl[i]) + " at " + std::to_string(i) +
                                             " is outside the cache [0, " + std::to_string(s) + ")");
  const DType st = src.dtype(), ct = cache.dtype();
  const int64_t stride0 = cache.stride(0);
  char* base = static_cast<char*>(cache.data());
  const int64_t esz = dtype_size(ct);
  parallel_for(t * h, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ti = i / h, hi = i % h;
      const char* from = elem_ptr(src, i * d);
      char* to = base + (hi * stride0 + static_cast<int64_t>(sl[ti]) * d) * esz;
      for (int64_t j = 0; j < d; ++j) store_f32(to, ct, j, load_f32(from, st, j));
    }
  });
}

}  // namespace mlxb::cpu
