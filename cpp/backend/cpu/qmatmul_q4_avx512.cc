// AVX-512 VNNI form of the 4-bit plane kernel (qmatmul_q4_avx2.cc explains the planes), two
// 64-element blocks per step: a weight row's 64 bytes for blocks (b, b + 1) give the even
// elements of both blocks (low nibbles, one vpandd) and the odd ones (high nibbles, a shift and a
// vpandd), in the order of the pair's activation planes (qmatmul.h). vpdpbusd forms w * hi
// (w unsigned, hi signed) for the even then the odd elements in one int32 chain, that sum is
// shifted by 8, and lo * w (lo unsigned, w signed 0..15) is added by two more vpdpbusd: each
// int32 lane then holds the exact sum of 8 elements of one block (lanes 0-7 block b, 8-15 block
// b + 1; below 2^22, so its float32 conversion is exact too), scaled by its block's d * s in one
// fused multiply-add. About 5.5 instructions per block and weight row against 10 in the
// one-block form. Used for every row count on CPUs with AVX-512 VNNI, so a row's result does not
// depend on the batch.
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
  const PackedRows pr{reinterpret_cast<const uint8_t*>(w.packed.data()), row_bytes, w.tile != 0};
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // Lane i of a pair's scale vector takes the scale product of block 2p + i / 8 of the chunk.
  const __m512i pick[kChunk / 2] = {
      _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
      _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
      _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
      _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};

  __m512 acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_setzero_ps();

  for (int64_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const int64_t nb = std::min(kChunk, blocks - b0);
    alignas(32) float sd[MT][NT][kChunk];
    scale_products<MT, NT>(w, acts, blocks, m0, n0, b0, nb, sd);
    if (nb < kChunk)  // a short last chunk: defined values past it (an odd last block's pair half meets x = 0 and 0 here)
      for (int r = 0; r < MT; ++r)
        for (int j = 0; j < NT; ++j)
          for (int64_t i = nb; i < kChunk; ++i) sd[r][j][i] = 0.0f;
    for (int64_t i = 0; i < nb; i += 2) {
      const int64_t b = b0 + i;
      if (prefetch) {
        prefetch_next(w, pr, sb_row, NT, n0, b);
        if (i + 1 < nb) prefetch_next(w, pr, sb_row, NT, n0, b + 1);
      }
      const bool two = i + 1 < nb;
      __m512i we[NT], wo[NT];
      for (int j = 0; j < NT; ++j) {
        const uint8_t* p = pr.block(n0 + j, b);
        // A lone last block reads only its own 32 bytes (the next 32 may lie past the weights).
        const __m512i bytes = two ? _mm512_loadu_si512(p) : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        we[j] = _mm512_and_si512(bytes, low4);
        wo[j] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
      }
      for (int r = 0; r < MT; ++r) {
        const int8_t* xp = q4_plane(acts, K, m0 + r, b, 0);
        const __m512i he = _mm512_loadu_si512(xp), ho = _mm512_loadu_si512(xp + 64);
        const __m512i le = _mm512_loadu_si512(xp + 128), lo = _mm512_loadu_si512(xp + 192);
        for (int j = 0; j < NT; ++j) {
          const __m512i sh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), we[j], he), wo[j], ho);
          const __m512i s32 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(sh, 8), le, we[j]), lo, wo[j]);
          const __m512 sc = _mm512_permutexvar_ps(pick[i / 2], _mm512_castps256_ps512(_mm256_load_ps(sd[r][j])));
          acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), sc, acc[r][j]);
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
