// Picks the matmul kernel for this CPU, and defines simd_level() for every dispatcher.
#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"

namespace mlxb::cpu {

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const CpuFeatures& f = cpu_features();
    if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx2 && f.fma && f.f16c) return SimdLevel::kAvx512;
    if (f.avx2 && f.fma && f.f16c) return SimdLevel::kAvx2;
    return SimdLevel::kScalar;
  }();
  return level;
}

void matmul_dispatch(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                     int64_t k) {
  if (simd_level() == SimdLevel::kAvx512) {
    // The bf16-dot GEMM stays off: a row's result must not depend on M (batch invariance).
    avx512::matmul(x, w, wt, bias, y, m, n, k, /*use_bf16_dot=*/false);
    return;
  }
  if (simd_level() >= SimdLevel::kAvx2) {
    avx2::matmul(x, w, wt, bias, y, m, n, k);
    return;
  }
  matmul_reference(x, w, wt, bias, y, m, n, k);
}

}  // namespace mlxb::cpu
