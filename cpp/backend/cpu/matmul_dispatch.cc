// Picks the matmul kernel for this CPU, and defines simd_level() for every dispatcher.
#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"
#include "ops/backends.h"

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

// bf16 weights on a CPU with AVX512_BF16 multiply bf16-rounded activations with vdpbf16ps
// (float32 accumulation: the arithmetic of a bf16 model in torch, and of llama.cpp's bf16 path),
// about twice the float32 FMA rate; everywhere else, and for float32 / float16 weights, the
// products are float32-exact. Both are batch-invariant. MLXB_CPU_MATMUL=exact keeps bf16 weights
// on the float32-exact kernels (for comparisons with a float32 oracle); =bf16dot asks for the
// vdpbf16ps kernels, which a CPU without AVX512_BF16 cannot run (exact is used there).
static bool bf16_dot() {
  static const bool on = [] {
    if (simd_level() != SimdLevel::kAvx512 || !cpu_features().avx512_bf16) return false;
    const char* v = std::getenv("MLXB_CPU_MATMUL");
    return !(v && std::strcmp(v, "exact") == 0);
  }();
  return on;
}

void matmul_dispatch(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                     int64_t k) {
  if (simd_level() == SimdLevel::kAvx512) {
    avx512::matmul(x, w, wt, bias, y, m, n, k, bf16_dot());
    return;
  }
  if (simd_level() >= SimdLevel::kAvx2) {
    avx2::matmul(x, w, wt, bias, y, m, n, k);
    return;
  }
  matmul_reference(x, w, wt, bias, y, m, n, k);
}

}  // namespace mlxb::cpu

namespace mlxb {
bool cpu_bf16_matmul() { return cpu::bf16_dot(); }
}  // namespace mlxb
