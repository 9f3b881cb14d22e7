// AVX2 helpers shared by the *_avx2.cc files (included only there; they are compiled with
// -mavx2 -mfma -mf16c): loads of f32/bf16/f16 as 8 floats, horizontal sum, and a vector exp.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"

namespace mlxb::cpu::avx2 {

inline __m256 load8_bf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <DType T>
inline __m256 load8(const void* base, int64_t i) {
  if constexpr (T == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  else if constexpr (T == DType::BF16) return load8_bf16(static_cast<const uint16_t*>(base) + i);
  else return load8_f16(static_cast<const uint16_t*>(base) + i);
}

template <DType T>
inline float load1(const void* base, int64_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(base)[i];
  else if constexpr (T == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline float hmax(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_max_ps(lo, hi);
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// exp(x) for float32 lanes: range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial,
// result scaled by 2^n; relative error ~2 ulp; underflows to 0 below -87.3, overflows to inf
// above 88.7 like expf.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.7228391f), lo = _mm256_set1_ps(-87.3365448f);
  const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n in two steps so n = 128 (x near 88.7) does not overflow the exponent field
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i half = _mm256_srai_epi32(ni, 1);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  res = _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), over);
  return _mm256_andnot_ps(under, res);
}

}  // namespace mlxb::cpu::avx2
