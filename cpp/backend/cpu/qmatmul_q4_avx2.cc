// AVX2 decode kernel for 4-bit MLX weights with groups of 64 or more, on the int16 activations
// of quantize_acts (IntActs in qmatmul.h) split into two byte planes: xq = 256 * hi + lo with
// hi = xq >> 8 (signed byte) and lo = xq & 255 (unsigned byte), exact for every int16. Weight
// nibbles (0..15) meet them in vpmaddubsw with no widening: maddubs(w, hi) (w unsigned, hi
// signed) and maddubs(lo, w) (lo unsigned, w signed 0..15); pair sums stay within int16
// (2 * 2 * 15 * 255 < 32768), then vpmaddwd by 256 and by 1 gives the exact int32 block sums
// sum(q * xq). So the result equals kernel_avx2_int's up to float32 summation order, at about
// half the instructions per weight. Per 64-element block the int32 sums are scaled by
// d_block * s_group (one fused multiply-add); the bias term b_g * sum_g(x) is a separate short
// dot product per row. Each tile prefetches the next tile's weights into L2 while it computes
// (measured 1.6x on DRAM-resident decode weights: 1 KB rows are too short for the hardware
// prefetcher). Into L2, not L1: a tile of the down projection (8 rows of K = 8192, 32 KB) would
// evict the activation planes and the tile being read from a 32 KB L1 (Zen 4, 1B shape,
// cpu_decode_bench q4: down 6.7-8.2 -> 4.8-5.4 ms per token over four alternating runs).
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul.h"
#include "backend/cpu/qmatmul_q4_tile.h"

namespace mlxb::cpu::qmm {
namespace {

inline __m256i ld(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// MT rows of x (m0..) times NT weight rows (n0..).
template <int MT, int NT>
void tile256(const Args& a, const Q4Acts& acts, int64_t m0, int64_t n0, bool prefetch) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, blocks = K / kBlock, row_bytes = K / 2;
  const int64_t sb_row = (K / w.group_size) * dtype_size(w.scales.dtype());
  const PackedRows pr{reinterpret_cast<const uint8_t*>(w.packed.data()), row_bytes, w.tile != 0};
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);

  __m256 acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm256_setzero_ps();

  for (int64_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const int64_t nb = std::min(kChunk, blocks - b0);
    alignas(32) float sd[MT][NT][kChunk];
    scale_products<MT, NT>(w, acts, blocks, m0, n0, b0, nb, sd);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      if (prefetch) prefetch_next(w, pr, sb_row, NT, n0, b);
      for (int j = 0; j < NT; ++j) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr.block(n0 + j, b)));
        const __m256i we = _mm256_and_si256(bytes, low4);                        // even elements
        const __m256i wo = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);  // odd elements
        for (int r = 0; r < MT; ++r) {
          // block b's planes: hi even, hi odd (64 bytes on), lo even, lo odd
          const int8_t* xp = q4_plane(acts, K, m0 + r, b, 0);
          const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(we, ld(xp)), _mm256_maddubs_epi16(wo, ld(xp + 64)));
          const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(ld(xp + 128), we), _mm256_maddubs_epi16(ld(xp + 192), wo));
          const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(ph, k256), _mm256_madd_epi16(pl, ones));
          acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_broadcast_ss(&sd[r][j][i]), acc[r][j]);
        }
      }
    }
  }

  for (int j = 0; j < NT; ++j)
    for (int r = 0; r < MT; ++r) a.y[(m0 + r) * a.N + n0 + j] = hsum(acc[r][j]) + bias_term(w, acts, m0 + r, n0 + j);
}

struct Avx2Tiles {
  const Args& a;
  const Q4Acts& acts;
  template <int MT, int NT>
  void tile(int64_t m0, int64_t n0, bool prefetch) const { tile256<MT, NT>(a, acts, m0, n0, prefetch); }
};

}  // namespace

bool q4_kernel_for(int bits, int group_size) { return bits == 4 && group_size % kBlock == 0; }

void quantize_acts_avx2(const float* x, int64_t M, int64_t K, int group_size, int bits, int16_t* q16, float* d,
                        float* gsum) {
  const int64_t block = int_block(bits, group_size), blocks = K / block, groups = K / group_size;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lim = _mm256_set1_ps(32767.0f), nlim = _mm256_set1_ps(-32767.0f);
  alignas(32) int32_t r[128];
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    for (int64_t g = 0; g < groups; ++g) {
      __m256 s = _mm256_setzero_ps();
      int64_t k = g * group_size;
      for (; k + 8 <= (g + 1) * group_size; k += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xm + k));
      float t = hsum(s);
      for (; k < (g + 1) * group_size; ++k) t += xm[k];
      gsum[m * groups + g] = t;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = xm + b * block;
      __m256 mx = _mm256_setzero_ps();
      for (int64_t j = 0; j < block; j += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask));
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float amax = _mm_cvtss_f32(h);
      // The same float operations as quantize_acts (qmatmul.cc), so q16 is identical.
      const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
      d[m * blocks + b] = amax / 32767.0f;
      const __m256 vid = _mm256_set1_ps(id);
      for (int64_t j = 0; j < block; j += 8) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + j), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(lim, _mm256_max_ps(nlim, v));
        _mm256_store_si256(reinterpret_cast<__m256i*>(r + j), _mm256_cvtps_epi32(v));
      }
      int16_t* o = q16 + m * K + b * block;
      if (bits == 4) {
        for (int64_t j = 0; j < block / 2; ++j) {
          o[j] = static_cast<int16_t>(r[2 * j]);
          o[block / 2 + j] = static_cast<int16_t>(r[2 * j + 1]);
        }
      } else {
        for (int64_t j = 0; j < block; ++j) o[j] = static_cast<int16_t>(r[j]);
      }
    }
  }
}

void split_planes_avx2(const int16_t* q16, int64_t M, int64_t K, int8_t* planes) {
  // q16 rows are already in nibble order per 64-block (32 even elements, then 32 odd ones).
  const __m256i mask = _mm256_set1_epi16(0xff);
  const int64_t blocks = K / kBlock;
  Q4Acts view;
  view.planes = planes;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int16_t* src = q16 + m * K + b * kBlock;
      int8_t* dst = const_cast<int8_t*>(q4_plane(view, K, m, b, 0));
      for (int h = 0; h < 2; ++h) {  // 32 int16 (even, then odd elements) -> 32 hi bytes and 32 lo bytes
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * h));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * h + 16));
        // packs works per 128-bit lane: fix the lane order with a permute.
        const __m256i hi = _mm256_permute4x64_epi64(_mm256_packs_epi16(_mm256_srai_epi16(v0, 8), _mm256_srai_epi16(v1, 8)), 0xd8);
        const __m256i lo = _mm256_permute4x64_epi64(_mm256_packus_epi16(_mm256_and_si256(v0, mask), _mm256_and_si256(v1, mask)), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * h), hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 + 64 * h), lo);
      }
    }
    if (blocks % 2 == 1) {  // the lone last block's pair: zero second halves (x = 0 there)
      int8_t* dst = const_cast<int8_t*>(q4_plane(view, K, m, blocks, 0));
      for (int part = 0; part < 4; ++part) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * part), _mm256_setzero_si256());
    }
  }
}

void kernel_avx2_q4(const Args& a, const Q4Acts& acts, int64_t n0, int64_t n1) {
  walk_tiles<8, 2>(Avx2Tiles{a, acts}, a.M, n0, n1);
}

}  // namespace mlxb::cpu::qmm
