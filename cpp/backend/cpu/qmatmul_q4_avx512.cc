// AVX-512 VNNI form of the 4-bit plane kernel (qmatmul_q4_avx2.cc explains the planes): a 64-element
// block's weight nibbles fill one zmm (the 32 even elements, then the 32 odd ones, the order of the
// activation planes), and vpdpbusd forms the int32 sums of w * hi (w unsigned, hi signed) and of
// lo * w (lo unsigned, w signed 0..15) directly; 256 * sum_hi + sum_lo is the exact block sum
// (every lane below 2^21, so its float32 conversion is exact too). About half the instructions of
// the AVX2 kernel per weight; the same integer sums, float32 accumulation over 16 lanes instead of
// 8. Used for every row count on CPUs with AVX-512 VNNI, so a row's result does not depend on the
// batch.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from an "undefined" register and trip -Wuninitialized when
// inlined (a false positive in the compiler's own headers), as in matmul_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "backend/cpu/qmatmul.h"
#include "backend/cpu/qmatmul_q4_tile.h"

namespace mlxb::cpu::qmm {
namespace {

// MT rows of x (m0..) times NT weight rows (n0..).
template <int MT, int NT>
void tile512(const Args& a, const Q4Acts& acts, int64_t m0, int64_t n0, bool prefetch) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, blocks = K / kBlock, row_bytes = K / 2;
  const int64_t sb_row = (K / w.group_size) * dtype_size(w.scales.dtype());
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const __m512i low4 = _mm512_set1_epi8(0x0f);

  __m512 acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_setzero_ps();

  for (int64_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const int64_t nb = std::min(kChunk, blocks - b0);
    alignas(32) float sd[MT][NT][kChunk];
    scale_products<MT, NT>(w, acts, blocks, m0, n0, b0, nb, sd);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      if (prefetch) prefetch_next(w, packed, row_bytes, sb_row, NT, n0 + NT, b);
      __m512i wv[NT];
      for (int j = 0; j < NT; ++j) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + (n0 + j) * row_bytes + b * 32));
        // [even elements (low nibbles) | odd elements (high nibbles)]
        wv[j] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(bytes), _mm256_srli_epi16(bytes, 4), 1), low4);
      }
      for (int r = 0; r < MT; ++r) {
        // planes of block b: [hi even 32, hi odd 32][lo even 32, lo odd 32]
        const int8_t* xp = acts.planes + ((m0 + r) * blocks + b) * 128;
        const __m512i hi = _mm512_loadu_si512(xp), lo = _mm512_loadu_si512(xp + 64);
        for (int j = 0; j < NT; ++j) {
          const __m512i sh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[j], hi);
          const __m512i sl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, wv[j]);
          const __m512i s32 = _mm512_add_epi32(_mm512_slli_epi32(sh, 8), sl);
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), _mm512_set1_ps(sd[r][j][i]), acc[r][j]);
        }
      }
    }
  }

  for (int j = 0; j < NT; ++j)
    for (int r = 0; r < MT; ++r)
      a.y[(m0 + r) * a.N + n0 + j] = _mm512_reduce_add_ps(acc[r][j]) + bias_term(w, acts, m0 + r, n0 + j);
}

struct Avx512Tiles {
  const Args& a;
  const Q4Acts& acts;
  template <int MT, int NT>
  void tile(int64_t m0, int64_t n0, bool prefetch) const { tile512<MT, NT>(a, acts, m0, n0, prefetch); }
};

}  // namespace

void kernel_avx512_q4(const Args& a, const Q4Acts& acts, int64_t n0, int64_t n1) {
  walk_tiles<8, 4>(Avx512Tiles{a, acts}, a.M, n0, n1);
}

}  // namespace mlxb::cpu::qmm
