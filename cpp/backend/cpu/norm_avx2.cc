// AVX2 row kernels for rms_norm (compiled with -mavx2 -mfma -mf16c): the same arithmetic as the
// reference loop in rms_norm.cc (sum of squares in float64, x * inv rounded before the weight
// multiplies it); only the float64 summation order differs.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_avx2.h"

namespace mlxb::cpu::avx2 {

void rms_norm_row(const float* x, const float* w, float* y, int64_t h, float eps) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  const int64_t h8 = h & ~int64_t{7}, h16 = h & ~int64_t{15};
  int64_t j = 0;
  for (; j < h16; j += 16) {
    const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + 8);
    const __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    const __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(b)), b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
    s0 = _mm256_fmadd_pd(a0, a0, s0);
    s1 = _mm256_fmadd_pd(a1, a1, s1);
    s2 = _mm256_fmadd_pd(b0, b0, s2);
    s3 = _mm256_fmadd_pd(b1, b1, s3);
  }
  for (; j < h8; j += 8) {
    const __m256 a = _mm256_loadu_ps(x + j);
    const __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    s0 = _mm256_fmadd_pd(a0, a0, s0);
    s1 = _mm256_fmadd_pd(a1, a1, s1);
  }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
  alignas(32) double t[4];
  _mm256_store_pd(t, s);
  double ss = (t[0] + t[1]) + (t[2] + t[3]);
  for (; j < h; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(h)) + eps);
  const __m256 iv = _mm256_set1_ps(inv);
  for (j = 0; j < h8; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), iv), _mm256_loadu_ps(w + j)));
  for (; j < h; ++j) y[j] = (x[j] * inv) * w[j];
}

}  // namespace mlxb::cpu::avx2
