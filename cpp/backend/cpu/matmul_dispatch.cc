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

// bf16 weights on an AMD CPU with AVX512_BF16 (Zen 4, Zen 5) multiply bf16-rounded activations
// with vdpbf16ps (float32 accumulation: the arithmetic of a bf16 model in torch, and of
// llama.cpp's bf16 path): there it issues at the rate of a 512-bit float32 FMA with twice the
// products (Zen 4 VM: bf16 GEMM 338 vs 176 GFLOP/s). Intel cores with AVX512_BF16 issue float32
// FMAs on two ports and vdpbf16ps on one, so the exact kernels are as fast (Xeon: 161 exact vs
// 132 GFLOP/s) and stay the default there, as everywhere else and for float32 / float16 weights.
// Both are batch-invariant. MLXB_CPU_MATMUL=exact or =bf16dot overrides the choice (bf16dot
// only where AVX512_BF16 exists).
bool bf16_dot() {
  static const bool on = [] {
    if (simd_level() != SimdLevel::kAvx512 || !cpu_features().avx512_bf16) return false;
    const char* v = std::getenv("MLXB_CPU_MATMUL");
    if (v && std::strcmp(v, "exact") == 0) return false;
    if (v && std::strcmp(v, "bf16dot") == 0) return true;
    return cpu_features().amd;
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
