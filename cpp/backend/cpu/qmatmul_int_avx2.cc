// AVX2 integer kernels for 4- and 8-bit MLX weights against int8-quantized activations (see
// IntActs in qmatmul.h). 4-bit: a 16-byte run of packed nibbles becomes 32 unsigned bytes in
// nibble order ([low nibbles | high nibbles]), multiplied with the activations' signed bytes by
// vpmaddubsw (|pair sum| <= 2 * 15 * 127, no saturation) and widened by vpmaddwd. 8-bit: weights
// widen to int16 and meet int16 activations in vpmaddwd (exact). Per 32-block the int32 sums are
// scaled by the block's d; per group by the weight scale; the bias term is b_g * sum(x over g).
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul.h"
#include "quant/affine.h"

namespace mlxb::cpu::qmm {
namespace {

inline float load_sb(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == DType::BF16) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int BITS, bool SPAN64, int MT, int NT>
void tile(const Args& a, const IntActs& acts, int64_t m0, int64_t n0) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, gs = w.group_size, groups = K / gs, blocks = K / 32;
  const int64_t row_bytes = K * BITS / 8;
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const void* sp = w.scales.data();
  const void* bp = w.biases.data();
  const DType st = w.scales.dtype();
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);

  __m256 acc[MT][NT];
  float bias_acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) {
      acc[r][j] = _mm256_setzero_ps();
      bias_acc[r][j] = 0.0f;
    }

  for (int64_t g = 0; g < groups; ++g) {
    __m256 gacc[MT][NT];
    for (int r = 0; r < MT; ++r)
      for (int j = 0; j < NT; ++j) gacc[r][j] = _mm256_setzero_ps();
    if (BITS == 4 && SPAN64) {
      // 64 elements per step: 32 packed bytes give the span's even elements (low nibbles) and
      // odd elements (high nibbles); the two int32 halves belong to the span's two 32-blocks.
      for (int64_t c = 0; c < gs; c += 64) {
        const int64_t k = g * gs + c;
        for (int j = 0; j < NT; ++j) {
          __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + (n0 + j) * row_bytes + k / 2));
          __m256i lo = _mm256_and_si256(v, low4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
          for (int r = 0; r < MT; ++r) {
            const int64_t m = m0 + r;
            const int8_t* xr = acts.q8 + m * K + k;
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr))),
                                         _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 32))));
            p = _mm256_madd_epi16(p, ones);
            gacc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_loadu_ps(acts.dvec + (m * K + k) / 8), gacc[r][j]);
          }
        }
      }
    } else
    for (int64_t c = 0; c < gs; c += 32) {
      const int64_t k = g * gs + c;
      const int64_t blk = k / 32;
      for (int j = 0; j < NT; ++j) {
        const uint8_t* src = packed + (n0 + j) * row_bytes + k * BITS / 8;
        if (BITS == 4) {
          __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
          __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes), low4);
          for (int r = 0; r < MT; ++r) {
            const int64_t m = m0 + r;
            __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acts.q8 + m * K + k));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(v, xq), ones);
            gacc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(acts.d + m * blocks + blk), gacc[r][j]);
          }
        } else {
          __m256i w0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
          __m256i w1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16)));
          for (int r = 0; r < MT; ++r) {
            const int64_t m = m0 + r;
            const int16_t* xr = acts.q16 + m * K + k;
            __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr))),
                                         _mm256_madd_epi16(w1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16))));
            gacc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(acts.d + m * blocks + blk), gacc[r][j]);
          }
        }
      }
    }
    for (int j = 0; j < NT; ++j) {
      const int64_t n = n0 + j;
      const float s = load_sb(sp, st, n * groups + g), b = load_sb(bp, st, n * groups + g);
      const __m256 vs = _mm256_set1_ps(s);
      for (int r = 0; r < MT; ++r) {
        acc[r][j] = _mm256_fmadd_ps(gacc[r][j], vs, acc[r][j]);
        bias_acc[r][j] += b * acts.gsum[(m0 + r) * groups + g];
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) a.y[(m0 + r) * a.N + n0 + j] = hsum(acc[r][j]) + bias_acc[r][j];
}

template <int BITS, int MT>
void rows(const Args& a, const IntActs& acts, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NT = MT == 1 ? 4 : MT == 2 ? 2 : 1;
  int64_t n = n0;
  if (BITS == 4 && acts.span == 64) {
    for (; n + NT <= n1; n += NT) tile<BITS, true, MT, NT>(a, acts, m0, n);
    for (; n < n1; ++n) tile<BITS, true, MT, 1>(a, acts, m0, n);
  } else {
    for (; n + NT <= n1; n += NT) tile<BITS, false, MT, NT>(a, acts, m0, n);
    for (; n < n1; ++n) tile<BITS, false, MT, 1>(a, acts, m0, n);
  }
}

template <int BITS>
void run(const Args& a, const IntActs& acts, int64_t n0, int64_t n1) {
  const int64_t nb = a.M > 4 ? 32 : n1 - n0;
  for (int64_t nb0 = n0; nb0 < n1; nb0 += nb) {
    const int64_t nb1 = std::min(n1, nb0 + nb);
    int64_t m = 0;
    for (; m + 4 <= a.M; m += 4) rows<BITS, 4>(a, acts, m, nb0, nb1);
    if (m + 2 <= a.M) { rows<BITS, 2>(a, acts, m, nb0, nb1); m += 2; }
    if (m < a.M) rows<BITS, 1>(a, acts, m, nb0, nb1);
  }
}

}  // namespace

void kernel_avx2_int(const Args& a, const IntActs& acts, int64_t n0, int64_t n1) {
  if (a.w->bits == 4) run<4>(a, acts, n0, n1);
  else run<8>(a, acts, n0, n1);
}

}  // namespace mlxb::cpu::qmm
