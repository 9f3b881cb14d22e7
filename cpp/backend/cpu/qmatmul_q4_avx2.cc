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

namespace mlxb::cpu::qmm {
namespace {

constexpr int64_t kBlock = 64;
constexpr int64_t kChunk = 8;  // blocks per chunk: their scale products are formed 8 at a time

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 consecutive scale/bias values as float32.
inline __m256 load8_sb(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
  if (t == DType::BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

inline float load1_sb(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == DType::BF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(h);
}

// Scale of each of `nb` blocks starting at block b0 of weight row n (groups of gs >= 64).
inline void block_scales(const QuantWeight& w, int64_t n, int64_t b0, int64_t nb, float* out) {
  const int64_t groups = w.cols / w.group_size;
  const DType st = w.scales.dtype();
  if (w.group_size == kBlock && nb == kChunk) {
    _mm256_storeu_ps(out, load8_sb(w.scales.data(), st, n * groups + b0));
    return;
  }
  const int64_t per = w.group_size / kBlock;
  for (int64_t i = 0; i < nb; ++i) out[i] = load1_sb(w.scales.data(), st, n * groups + (b0 + i) / per);
}

inline __m256i ld(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// MT rows of x (m0..) times NT weight rows (n0..).
template <int MT, int NT>
void tile(const Args& a, const Q4Acts& acts, int64_t m0, int64_t n0, bool prefetch) {
  const QuantWeight& w = *a.w;
  const int64_t K = a.K, blocks = K / kBlock, row_bytes = K / 2;
  const int64_t sb_row = (K / w.group_size) * dtype_size(w.scales.dtype()), sb_bytes = NT * sb_row;
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(w.packed.data());
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);

  __m256 acc[MT][NT];
  for (int r = 0; r < MT; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm256_setzero_ps();

  for (int64_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const int64_t nb = std::min(kChunk, blocks - b0);
    // sd[r][j][i] = d(row m0+r, block b0+i) * s(row n0+j, block b0+i)
    alignas(32) float sd[MT][NT][kChunk];
    for (int j = 0; j < NT; ++j) {
      alignas(32) float s[kChunk];
      block_scales(w, n0 + j, b0, nb, s);
      for (int r = 0; r < MT; ++r) {
        const float* d = acts.d + (m0 + r) * blocks + b0;
        if (nb == kChunk) {
          _mm256_store_ps(sd[r][j], _mm256_mul_ps(_mm256_load_ps(s), _mm256_loadu_ps(d)));
        } else {
          for (int64_t i = 0; i < nb; ++i) sd[r][j][i] = s[i] * d[i];
        }
      }
    }
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      if (prefetch) {
        // The next tile's packed rows (contiguous, NT * 32 bytes per block of this one; into L2)
        // and its scales and biases (L1), fetched while this tile computes: a tile's rows are too
        // short (K / 2 bytes each) for the hardware prefetcher to lock on before they end.
        const char* p = reinterpret_cast<const char*>(packed + (n0 + NT) * row_bytes) + b * NT * 32;
        for (int l = 0; l < NT * 32; l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
        if (b * 64 < sb_bytes) {
          _mm_prefetch(reinterpret_cast<const char*>(w.scales.data()) + (n0 + NT) * sb_row + b * 64, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(w.biases.data()) + (n0 + NT) * sb_row + b * 64, _MM_HINT_T0);
        }
      }
      for (int j = 0; j < NT; ++j) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + (n0 + j) * row_bytes + b * 32));
        const __m256i we = _mm256_and_si256(bytes, low4);                        // even elements
        const __m256i wo = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);  // odd elements
        for (int r = 0; r < MT; ++r) {
          // planes of block b: [hi even 32][hi odd 32][lo even 32][lo odd 32]
          const int8_t* xp = acts.planes + ((m0 + r) * blocks + b) * 128;
          const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(we, ld(xp)), _mm256_maddubs_epi16(wo, ld(xp + 32)));
          const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(ld(xp + 64), we), _mm256_maddubs_epi16(ld(xp + 96), wo));
          const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(ph, k256), _mm256_madd_epi16(pl, ones));
          acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_broadcast_ss(&sd[r][j][i]), acc[r][j]);
        }
      }
    }
  }

  // Bias term: sum over groups of b_g * sum_g(x).
  const int64_t groups = K / w.group_size;
  const DType st = w.biases.dtype();
  for (int j = 0; j < NT; ++j) {
    const int64_t n = n0 + j;
    for (int r = 0; r < MT; ++r) {
      const float* gs = acts.gsum + (m0 + r) * groups;
      __m256 bv = _mm256_setzero_ps();
      int64_t g = 0;
      for (; g + 8 <= groups; g += 8) bv = _mm256_fmadd_ps(load8_sb(w.biases.data(), st, n * groups + g), _mm256_loadu_ps(gs + g), bv);
      float bsum = hsum(bv);
      for (; g < groups; ++g) bsum += load1_sb(w.biases.data(), st, n * groups + g) * gs[g];
      a.y[(m0 + r) * a.N + n] = hsum(acc[r][j]) + bsum;
    }
  }
}

template <int MT>
void rows(const Args& a, const Q4Acts& acts, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NT = MT == 1 ? 8 : 2;
  int64_t n = n0;
  for (; n + NT <= n1; n += NT) tile<MT, NT>(a, acts, m0, n, n + 2 * NT <= n1);
  for (; n < n1; ++n) tile<MT, 1>(a, acts, m0, n, false);
}

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
  // q16 rows are already in nibble order per 64-block; planes [M][K/64][hi 64][lo 64].
  const __m256i mask = _mm256_set1_epi16(0xff);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < K / kBlock; ++b) {
      const int16_t* src = q16 + m * K + b * kBlock;
      int8_t* dst = planes + (m * (K / kBlock) + b) * 128;
      for (int h = 0; h < 2; ++h) {  // 32 int16 -> 32 hi bytes and 32 lo bytes
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * h));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * h + 16));
        // packs works per 128-bit lane: fix the lane order with a permute.
        const __m256i hi = _mm256_permute4x64_epi64(_mm256_packs_epi16(_mm256_srai_epi16(v0, 8), _mm256_srai_epi16(v1, 8)), 0xd8);
        const __m256i lo = _mm256_permute4x64_epi64(_mm256_packus_epi16(_mm256_and_si256(v0, mask), _mm256_and_si256(v1, mask)), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * h), hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 + 32 * h), lo);
      }
    }
}

void kernel_avx2_q4(const Args& a, const Q4Acts& acts, int64_t n0, int64_t n1) {
  // Column blocks keep a block's packed rows in cache while every row tile of x passes over it.
  const int64_t nb = a.M > 4 ? 32 : n1 - n0;
  for (int64_t c0 = n0; c0 < n1; c0 += nb) {
    const int64_t c1 = std::min(n1, c0 + nb);
    int64_t m = 0;
    for (; m + 4 <= a.M; m += 4) rows<4>(a, acts, m, c0, c1);
    for (; m + 2 <= a.M; m += 2) rows<2>(a, acts, m, c0, c1);
    if (m < a.M) rows<1>(a, acts, m, c0, c1);
  }
}

}  // namespace mlxb::cpu::qmm
