// AVX2 gated activations (compiled with -mavx2 -mfma -mf16c): SiLU and GELU-tanh with the vector
// exp of simd_avx2.h, same formulas as gated_act_reference; GELU exact stays on the reference
// (std::erf) since no family here is bound by it.
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_avx2.h"

namespace mlxb::cpu::avx2 {

void gated_act(const float* g, const float* u, float* o, int64_t n, Activation act) {
  if (act == Activation::kGeluExact) {
    gated_act_reference(g, u, o, n, act);
    return;
  }
  const int64_t n8 = n & ~int64_t{7};
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), two = _mm256_set1_ps(2.0f);
  if (act == Activation::kSiLU) {
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
  } else {
    const __m256 c = _mm256_set1_ps(0.79788456080286536f), c3 = _mm256_set1_ps(0.044715f);
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 z = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(c3, x), _mm256_mul_ps(x, x), x));
      // tanh(z) = 1 - 2 / (exp(2z) + 1)
      const __m256 th = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(exp8(_mm256_mul_ps(two, z)), one)));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, th)), _mm256_loadu_ps(u + i)));
    }
  }
  gated_act_reference(g + n8, u + n8, o + n8, n - n8, act);
}

}  // namespace mlxb::cpu::avx2
