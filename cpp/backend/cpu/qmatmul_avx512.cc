// AVX-512 quantized matmul: tiles of MT rows of x by NT weight rows; each group of each weight row
// is unpacked once into registers and used for all MT rows. 4-bit: a byte's two nibbles index a
// 16-entry table holding scale * q + bias (vpermps), against x in nibble order; 8-bit: bytes
// widen and convert; 2/3/5/6-bit: the group is unpacked to bytes first, then read as 8-bit.
// GCC 12 warns about its own _mm512_undefined_* inside intrinsics headers (false positives).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul_simd.h"

namespace mlxb::cpu::qmm {
namespace {

template <int BITS, int MT, int NT>
void tile(const Args& a, int64_t m0, int64_t n0) {
  constexpr int NA = (MT * NT >= 8) ? 1 : 2;
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, gs = w.group_size, groups = K / gs;
  const int64_t row_bytes = quant::packed_cols(K, w.bits) * 4;
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const void* sp = w.scales.data();
  const void* bp = w.biases.data();
  const DType st = w.scales.dtype();
  const float* x = a.x + m0 * K;

  __m512 acc[MT][NT][NA];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j)
      for (int t = 0; t < NA; ++t) acc[r][j][t] = _mm512_setzero_ps();
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  alignas(64) uint8_t buf[NT][128];

  for (int64_t g = 0; g < groups; ++g) {
    __m512 lut[NT], vs[NT], vb[NT];
    const uint8_t* src[NT];
    for (int j = 0; j < NT; ++j) {
      const int64_t n = n0 + j;
      const float s = load_sb(sp, st, n * groups + g), b = load_sb(bp, st, n * groups + g);
      vs[j] = _mm512_set1_ps(s);
      vb[j] = _mm512_set1_ps(b);
      if (BITS == 4) lut[j] = _mm512_fmadd_ps(iota, vs[j], vb[j]);
      src[j] = group_bytes<BITS>(packed, row_bytes, n, g, gs, buf[j]);
    }
    for (int64_t c = 0; c < gs; c += 32) {
      const int64_t k = g * gs + c;
      for (int j = 0; j < NT; ++j) {
        __m512 d0, d1;
        if (BITS == 4) {
          __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + c / 2)));
          d0 = _mm512_permutexvar_ps(q, lut[j]);
          d1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut[j]);
        } else {
          __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + c))));
          __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + c + 16))));
          d0 = _mm512_fmadd_ps(q0, vs[j], vb[j]);
          d1 = _mm512_fmadd_ps(q1, vs[j], vb[j]);
        }
        for (int r = 0; r < MT; ++r) {
          const float* xr = x + r * K + k;
          acc[r][j][0] = _mm512_fmadd_ps(d0, _mm512_loadu_ps(xr), acc[r][j][0]);
          acc[r][j][NA - 1] = _mm512_fmadd_ps(d1, _mm512_loadu_ps(xr + 16), acc[r][j][NA - 1]);
        }
      }
    }
  }
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) {
      __m512 s = acc[r][j][0];
      if (NA == 2) s = _mm512_add_ps(s, acc[r][j][NA - 1]);
      a.y[(m0 + r) * a.N + n0 + j] = _mm512_reduce_add_ps(s);
    }
}

template <int BITS, int MT>
void rows(const Args& a, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NT = MT <= 2 ? 4 : 2;
  int64_t n = n0;
  for (; n + NT <= n1; n += NT) tile<BITS, MT, NT>(a, m0, n);
  for (; n < n1; ++n) tile<BITS, MT, 1>(a, m0, n);
}

template <int BITS>
void run(const Args& a, int64_t n0, int64_t n1) {
  // Column blocks keep a block's packed rows in cache while every row tile of x passes over it.
  const int64_t nb = a.M > 8 ? 32 : n1 - n0;
  for (int64_t nb0 = n0; nb0 < n1; nb0 += nb) {
    const int64_t nb1 = std::min(n1, nb0 + nb);
    int64_t m = 0;
    for (; m + 8 <= a.M; m += 8) rows<BITS, 8>(a, m, nb0, nb1);
    if (m + 4 <= a.M) { rows<BITS, 4>(a, m, nb0, nb1); m += 4; }
    if (m + 2 <= a.M) { rows<BITS, 2>(a, m, nb0, nb1); m += 2; }
    if (m < a.M) rows<BITS, 1>(a, m, nb0, nb1);
  }
}

}  // namespace

void kernel_avx512(const Args& a, int64_t n0, int64_t n1) {
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
