// AVX2 gated activations (compiled with -mavx2 -mfma -mf16c): SiLU and GELU-tanh with the vector
// exp of simd_avx2.h, same formulas as gated_act_reference. GELU exact uses
// 1 + erf(z) = 2 - erfc(|z|) for z >= 0 and erfc(|z|) for z < 0, with erfc(a) = t exp(-a^2 + P(t)),
// t = 1 / (1 + a / 2), P the degree-9 Chebyshev fit (fractional error < 1.2e-7 for every a >= 0;
// Numerical Recipes' erfcc), so the GELU value's relative error stays near 1e-7.
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_avx2.h"

namespace mlxb::cpu::avx2 {

void gated_act(const float* g, const float* u, float* o, int64_t n, Activation act) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), two = _mm256_set1_ps(2.0f);
  if (act == Activation::kGeluExact) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 rsqrt2 = _mm256_set1_ps(0.70710678118654752f);
    static const float c[10] = {-1.26551223f, 1.00002368f, 0.37409196f, 0.09678418f, -0.18628806f,
                                0.27886807f,  -1.13520398f, 1.48851587f, -0.82215223f, 0.17087277f};
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 z = _mm256_mul_ps(x, rsqrt2);
      const __m256 a = _mm256_and_ps(z, abs_mask);
      const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(half, a, one));
      __m256 p = _mm256_set1_ps(c[9]);
      for (int j = 8; j >= 0; --j) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c[j]));
      const __m256 erfc = _mm256_mul_ps(t, exp8(_mm256_fnmadd_ps(a, a, p)));  // erfc(|z|)
      const __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
      const __m256 one_plus_erf = _mm256_blendv_ps(_mm256_sub_ps(two, erfc), erfc, neg);
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), one_plus_erf), _mm256_loadu_ps(u + i)));
    }
  } else if (act == Activation::kSiLU) {
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
