// Host memory for model weights (see weight_memory.h).
#include "core/weight_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace mlxb {

Tensor weight_memory(const Shape& shape, DType dtype, const std::string& name) {
  constexpr int64_t kHuge = int64_t{2} << 20;
  int64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) bytes = checked_mul(bytes, d, "tensor bytes");
  if (bytes < kHuge) return Tensor::empty(shape, dtype);
  const int64_t rounded = checked_add(bytes, kHuge - 1, "tensor bytes") / kHuge * kHuge;
  void* p = std::aligned_alloc(static_cast<size_t>(kHuge), static_cast<size_t>(rounded));
  if (!p) fail(ErrorCode::kOutOfMemory, "out of host memory allocating " + std::to_string(bytes) + " bytes for '" + name + "'", name);
#ifdef MADV_HUGEPAGE
  madvise(p, static_cast<size_t>(rounded), MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  auto st = std::make_shared<Storage>();
  st->data = p;
  st->bytes = bytes;
  st->device = Device::kCPU;
  st->release = [](void* q) { std::free(q); };
  return Tensor(std::move(st), 0, dtype, shape);
}

}  // namespace mlxb
