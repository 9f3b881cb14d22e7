// Picks the matmul kernel for this CPU, and defines simd_level() for every dispatcher.
#include <cstdlib>
#include <cstring>

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

// MLXB_CPU_MATMUL=bf16dot (opt-in, for benchmarks): bf16 weights multiply bf16-rounded
// activations with vdpbf16ps where the CPU has AVX512_BF16 (batch-invariant, but not float32
// exact, so never the default: float32 results must match the float32 oracle).
static bool bf16_dot_requested() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_CPU_MATMUL");
    return v && std::strcmp(v, "bf16dot") == 0 && cpu_features().avx512_bf16;
  }();
  return on;
}

void matmul_dispatch(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                     int64_t k) {
  if (simd_level() == SimdLevel::kAvx512) {
    avx512::matmul(x, w, wt, bias, y, m, n, k, bf16_dot_requested());
    return;
  }
  if (simd_level() >= SimdLevel::kAvx2) {
    avx2::matmul(x, w, wt, bias, y, m, n, k);
    return;
  }
  matmul_reference(x, w, wt, bias, y, m, n, k);
}

}  // namespace mlxb::cpu
