// AVX2 quantized matmul: the same tiling as qmatmul_avx512.cc with 8-lane vectors. Nibbles and
// bytes widen to int32, convert, and become scale * q + bias with one FMA; 2/3/5/6-bit groups are
// unpacked to bytes first.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul_simd.h"
#include "backend/cpu/simd_avx2.h"

namespace mlxb::cpu::qmm {
namespace {

inline __m256 widen8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

template <int BITS, int MT, int NT>
void tile(const Args& a, int64_t m0, int64_t n0) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, gs = w.group_size, groups = K / gs;
  const int64_t row_bytes = quant::packed_cols(K, w.bits) * 4;
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const void* sp = w.scales.data();
  const void* bp = w.biases.data();
  const DType st = w.scales.dtype();
  const float* x = a.x + m0 * K;
  const __m128i low4 = _mm_set1_epi8(0x0f);

  __m256 acc[MT][NT][2];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j][0] = acc[r][j][1] = _mm256_setzero_ps();
  alignas(32) uint8_t buf[NT][128];

  for (int64_t g = 0; g < groups; ++g) {
    __m256 vs[NT], vb[NT];
    const uint8_t* src[NT];
    for (int j = 0; j < NT; ++j) {
      const int64_t n = n0 + j;
      vs[j] = _mm256_set1_ps(load_sb(sp, st, n * groups + g));
      vb[j] = _mm256_set1_ps(load_sb(bp, st, n * groups + g));
      src[j] = group_bytes<BITS>(packed, row_bytes, n, g, gs, buf[j]);
    }
    for (int64_t c = 0; c < gs; c += 32) {
      const int64_t k = g * gs + c;
      for (int j = 0; j < NT; ++j) {
        __m256 d[4];
        if (BITS == 4) {
          __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + c / 2));
          __m128i lo = _mm_and_si128(bytes, low4);
          __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
          d[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
          d[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
          d[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
          d[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
        } else {
          for (int v = 0; v < 4; ++v) d[v] = widen8(src[j] + c + 8 * v);
        }
        for (int v = 0; v < 4; ++v) d[v] = _mm256_fmadd_ps(d[v], vs[j], vb[j]);
        for (int r = 0; r < MT; ++r) {
          const float* xr = x + r * K + k;
          acc[r][j][0] = _mm256_fmadd_ps(d[0], _mm256_loadu_ps(xr), acc[r][j][0]);
          acc[r][j][1] = _mm256_fmadd_ps(d[1], _mm256_loadu_ps(xr + 8), acc[r][j][1]);
          acc[r][j][0] = _mm256_fmadd_ps(d[2], _mm256_loadu_ps(xr + 16), acc[r][j][0]);
          acc[r][j][1] = _mm256_fmadd_ps(d[3], _mm256_loadu_ps(xr + 24), acc[r][j][1]);
        }
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) a.y[(m0 + r) * a.N + n0 + j] = avx2::hsum(_mm256_add_ps(acc[r][j][0], acc[r][j][1]));
}

template <int BITS, int MT>
void rows(const Args& a, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NT = MT <= 2 ? 2 : 1;
  int64_t n = n0;
  for (; n + NT <= n1; n += NT) tile<BITS, MT, NT>(a, m0, n);
  for (; n < n1; ++n) tile<BITS, MT, 1>(a, m0, n);
}

template <int BITS>
void run(const Args& a, int64_t n0, int64_t n1) {
  const int64_t nb = a.M > 4 ? 32 : n1 - n0;
  for (int64_t nb0 = n0; nb0 < n1; nb0 += nb) {
    const int64_t nb1 = std::min(n1, nb0 + nb);
    int64_t m = 0;
    for (; m + 4 <= a.M; m += 4) rows<BITS, 4>(a, m, nb0, nb1);
    if (m + 2 <= a.M) { rows<BITS, 2>(a, m, nb0, nb1); m += 2; }
    if (m < a.M) rows<BITS, 1>(a, m, nb0, nb1);
  }
}

}  // namespace

void kernel_avx2(const Args& a, int64_t n0, int64_t n1) {
  switch (a.w->bits) {
    case 2: run<2>(a, n0, n1); break;
    case 3: run<3>(a, n0, n1); break;
    case 4: run<4>(a, n0, n1); break;
    case 5: run<5>(a, n0, n1); break;
    case 6: run<6>(a, n0, n1); break;
    default: run<8>(a, n0, n1); break;
  }
}

}  // namespace mlxb::cpu::qmm
