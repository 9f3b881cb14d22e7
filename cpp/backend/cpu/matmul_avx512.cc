// AVX-512 matmul kernels (this file alone is compiled with AVX-512 F/BW/VL/DQ/BF16 flags; it is
// only called when cpu_features() reports F/BW/DQ/VL, and the bf16-dot mode only with BF16).
// Both modes are the GEMV (M <= 4) and register-tiled GEMM (M > 4) of matmul_ordered.h, so every
// output is computed in one order whatever M is (batch invariance):
// - exact (Exact16): weights converted exactly to float32, float32 FMA over 16 lanes; the GEMM
//   packs each L2 block of weights to float32 once and runs 6 x 4 tiles of 16-lane accumulators.
// - bf16-dot (Bf16Dot, bf16 weights only): activations rounded to bf16 (round to nearest even)
//   and vdpbf16ps over 32 elements per step (pairs of products accumulated in float32, the
//   precision torch uses for a bf16 model); weights used as stored, no conversion.
#include <immintrin.h>

// GCC 12's AVX-512 conversion intrinsics start from an "undefined" register and trip
// -Wuninitialized when inlined (a false positive in the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_ordered.h"

namespace mlxb::cpu::avx512 {
namespace {

template <DType T>
inline __m512 load16(const void* base, int64_t i) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (T == DType::BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  }
}

inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

struct Exact16 {
  using acc_t = __m512;
  using xv_t = __m512;
  using wv_t = __m512;
  using xin_t = float;
  using win_t = float;
  static constexpr int kStep = 16, kAccFloats = 16, kMT = 6, kRT = 4;
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 load_acc(const float* p) { return _mm512_load_ps(p); }
  static void store_acc(float* p, __m512 v) { _mm512_store_ps(p, v); }
  static __m512 load_x(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_packed_w(const float* p) { return _mm512_loadu_ps(p); }
  template <DType T>
  static __m512 load_w(const void* base, int64_t i) { return load16<T>(base, i); }
  template <DType T>
  static void pack_w(const void* base, int64_t i, float* dst) { _mm512_storeu_ps(dst, load16<T>(base, i)); }
  static void pack_x(const float* src, int64_t count, float* dst) { std::memcpy(dst, src, static_cast<size_t>(count) * 4); }
  static __m512 madd(__m512 acc, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, acc); }
  static float hsum(__m512 v) { return hsum16(v); }
  static float round_x(float v) { return v; }
  static void pin(__m512& v) { asm("" : "+v"(v)); }
};

struct Bf16Dot {
  using acc_t = __m512;
  using xv_t = __m512bh;
  using wv_t = __m512bh;
  using xin_t = uint16_t;
  using win_t = uint16_t;
  static constexpr int kStep = 32, kAccFloats = 16, kMT = 6, kRT = 4;
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 load_acc(const float* p) { return _mm512_load_ps(p); }
  static void store_acc(float* p, __m512 v) { _mm512_store_ps(p, v); }
  static __m512bh load_x(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static __m512bh load_packed_w(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  template <DType T>
  static __m512bh load_w(const void* base, int64_t i) {
    static_assert(T == DType::BF16, "the bf16-dot mode takes bf16 weights only");
    return (__m512bh)_mm512_loadu_si512(static_cast<const uint16_t*>(base) + i);
  }
  template <DType T>
  static void pack_w(const void* base, int64_t i, uint16_t* dst) {
    static_assert(T == DType::BF16, "the bf16-dot mode takes bf16 weights only");
    _mm512_storeu_si512(dst, _mm512_loadu_si512(static_cast<const uint16_t*>(base) + i));
  }
  // Round to nearest even; elements [2j, 2j+1] form lane j's pair, as in the weights.
  static void pack_x(const float* src, int64_t count, uint16_t* dst) {
    for (int64_t p = 0; p < count; p += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + p + 16), _mm512_loadu_ps(src + p));
      _mm512_storeu_si512(dst + p, (__m512i)v);
    }
  }
  static __m512 madd(__m512 acc, __m512bh x, __m512bh w) { return _mm512_dpbf16_ps(acc, x, w); }
  static float hsum(__m512 v) { return hsum16(v); }
  static float round_x(float v) { return bf16_to_f32(f32_to_bf16(v)); }
  static void pin(__m512bh& v) { asm("" : "+v"(v)); }
};

}  // namespace

void matmul_blocked(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  if (m <= 4) ordered::gemv<Bf16Dot, DType::BF16, true>(x, w, bias, y, m, n, k);
  else ordered::gemm<Bf16Dot, DType::BF16, true>(x, w, bias, y, m, n, k);
}

void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
            bool use_bf16_dot) {
  if (use_bf16_dot && wt == DType::BF16) {
    if (m <= 4) ordered::gemv<Bf16Dot, DType::BF16>(x, w, bias, y, m, n, k);
    else ordered::gemm<Bf16Dot, DType::BF16>(x, w, bias, y, m, n, k);
    return;
  }
  ordered::matmul<Exact16>(x, w, wt, bias, y, m, n, k);
}

}  // namespace mlxb::cpu::avx512
