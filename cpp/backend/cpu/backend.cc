// CPU backend singleton and host memory.
#include "backend/cpu/backend.h"

#include <cstdlib>
#include <cstring>

#include "ops/backends.h"

namespace mlxb {
namespace cpu {

void* CpuBackend::alloc(int64_t bytes) {
  size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) fail(ErrorCode::kOutOfMemory, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void CpuBackend::free(void* p) { std::free(p); }

void CpuBackend::copy(void* dst, Device dst_dev, const void* src, Device src_dev, int64_t bytes) {
  if (dst_dev != Device::kCPU || src_dev != Device::kCPU) {
    backend(Device::kCUDA).copy(dst, dst_dev, src, src_dev, bytes);
    return;
  }
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::zero(void* p, int64_t bytes) {
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
}

}  // namespace cpu

Backend& cpu_backend() {
  static cpu::CpuBackend* b = new cpu::CpuBackend();
  return *b;
}

}  // namespace mlxb
