// AVX2 integer kernels for 4- and 8-bit MLX weights against int16-quantized activations (see
// IntActs in qmatmul.h). Weight integers widen to int16 and meet the activations in vpmaddwd
// (exact: |q * xq| <= 255 * 32767, pair and block sums fit int32). 4-bit: a block's packed bytes
// give its even elements (low nibbles) and odd elements (high nibbles), matching the nibble order
// of the activations. Per block the int32 sums are scaled by the block's d; per group by the
// weight scale; the bias term is b_g * sum(x over g).
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul_simd.h"
#include "backend/cpu/simd_avx2.h"

namespace mlxb::cpu::qmm {
namespace {

inline __m256i ld(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// One block of weight row j widened to int16, as 16-lane vectors in activation order.
template <int BITS, int BLOCK>
struct Widened {
  __m256i v[BLOCK / 16];
};

template <int BITS, int BLOCK>
inline Widened<BITS, BLOCK> widen(const uint8_t* src, __m256i low4) {
  Widened<BITS, BLOCK> w;
  if (BITS == 8) {
    for (int i = 0; i < BLOCK / 16; ++i) w.v[i] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16 * i)));
  } else if (BLOCK == 64) {
    __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    __m256i lo = _mm256_and_si256(bytes, low4);                          // even elements
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);    // odd elements
    w.v[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo));
    w.v[1] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(lo, 1));
    w.v[2] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi));
    w.v[3] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(hi, 1));
  } else {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm256_castsi256_si128(low4);
    w.v[0] = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, m));
    w.v[1] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), m));
  }
  return w;
}

template <int BITS, int BLOCK, int MT, int NT>
void tile(const Args& a, const IntActs& acts, int64_t m0, int64_t n0) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, gs = w.group_size, groups = K / gs, blocks = K / BLOCK;
  const int64_t row_bytes = K * BITS / 8;
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const void* sp = w.scales.data();
  const void* bp = w.biases.data();
  const DType st = w.scales.dtype();
  const __m256i low4 = _mm256_set1_epi8(0x0f);

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
    for (int64_t c = 0; c < gs; c += BLOCK) {
      const int64_t k = g * gs + c;
      for (int j = 0; j < NT; ++j) {
        const Widened<BITS, BLOCK> wv = widen<BITS, BLOCK>(packed + (n0 + j) * row_bytes + k * BITS / 8, low4);
        for (int r = 0; r < MT; ++r) {
          const int64_t m = m0 + r;
          const int16_t* xr = acts.q16 + m * K + k;
          __m256i p = _mm256_madd_epi16(wv.v[0], ld(xr));
          for (int i = 1; i < BLOCK / 16; ++i) p = _mm256_add_epi32(p, _mm256_madd_epi16(wv.v[i], ld(xr + 16 * i)));
          gacc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(acts.d + m * blocks + k / BLOCK), gacc[r][j]);
        }
      }
    }
    for (int j = 0; j < NT; ++j) {
      const int64_t n = n0 + j;
      const __m256 vs = _mm256_set1_ps(load_sb(sp, st, n * groups + g));
      const float b = load_sb(bp, st, n * groups + g);
      for (int r = 0; r < MT; ++r) {
        acc[r][j] = _mm256_fmadd_ps(gacc[r][j], vs, acc[r][j]);
        bias_acc[r][j] += b * acts.gsum[(m0 + r) * groups + g];
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) a.y[(m0 + r) * a.N + n0 + j] = avx2::hsum(acc[r][j]) + bias_acc[r][j];
}

template <int BITS, int BLOCK, int MT>
void rows(const Args& a, const IntActs& acts, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NT = MT == 1 ? 4 : MT == 2 ? 2 : 1;
  int64_t n = n0;
  for (; n + NT <= n1; n += NT) tile<BITS, BLOCK, MT, NT>(a, acts, m0, n);
  for (; n < n1; ++n) tile<BITS, BLOCK, MT, 1>(a, acts, m0, n);
}

template <int BITS, int BLOCK>
void run(const Args& a, const IntActs& acts, int64_t n0, int64_t n1) {
  // Column blocks keep a block's packed rows in cache while every row tile of x passes over it.
  const int64_t nb = a.M > 4 ? 32 : n1 - n0;
  for (int64_t nb0 = n0; nb0 < n1; nb0 += nb) {
    const int64_t nb1 = std::min(n1, nb0 + nb);
    int64_t m = 0;
    for (; m + 4 <= a.M; m += 4) rows<BITS, BLOCK, 4>(a, acts, m, nb0, nb1);
    if (m + 2 <= a.M) { rows<BITS, BLOCK, 2>(a, acts, m, nb0, nb1); m += 2; }
    if (m < a.M) rows<BITS, BLOCK, 1>(a, acts, m, nb0, nb1);
  }
}

}  // namespace

void kernel_avx2_int(const Args& a, const IntActs& acts, int64_t n0, int64_t n1) {
  if (a.w->bits == 8) run<8, 32>(a, acts, n0, n1);
  else if (acts.block == 64) run<4, 64>(a, acts, n0, n1);
  else run<4, 32>(a, acts, n0, n1);
}

}  // namespace mlxb::cpu::qmm
