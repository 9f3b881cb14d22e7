// What the 4-bit plane kernels (qmatmul_q4_avx2.cc, qmatmul_q4_avx512.cc) share: the 64-element
// block, scale and bias loads, and the bias term of a row. Everything here has internal linkage
// (an anonymous namespace): the two files are compiled with different target flags, and an inline
// function of one name shared between them could be merged into the wider instruction set's copy.
#pragma once
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/qmatmul.h"
#include "quant/affine.h"

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

// sd[r][j][i] = d(row m0 + r, block b0 + i) * s(row n0 + j, block b0 + i), i < nb.
template <int MT, int NT>
inline void scale_products(const QuantWeight& w, const Q4Acts& acts, int64_t blocks, int64_t m0, int64_t n0, int64_t b0,
                           int64_t nb, float (&sd)[MT][NT][kChunk]) {
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
}

// Where a tile's packed weight rows lie: row-major (rows of K / 2 bytes) or in the 8-row tiles of
// QuantWeight::tile (quant/affine.h), where the 64-byte pieces of 8 rows alternate. Blocks 2p and
// 2p + 1 of a row are 64 contiguous bytes either way.
struct PackedRows {
  const uint8_t* packed;
  int64_t row_bytes;
  bool tiled;
  // Block 0 of row n; block b lies at row(n) + (b / 2) * pair_stride() + (b % 2) * 32.
  const uint8_t* row(int64_t n) const {
    return packed + (tiled ? quant::tiled_byte(n, 0, row_bytes) : n * row_bytes);
  }
  int64_t pair_stride() const { return tiled ? quant::kTileRows * quant::kTilePiece : 2 * 32; }
  const uint8_t* block(int64_t n, int64_t b) const { return row(n) + (b / 2) * pair_stride() + (b % 2) * 32; }
};

// Weight bytes fetched ahead of a tiled tile's stream (into L2): measured 2-16 KB about equal, none
// slower (1B-shaped decode matmuls, Zen 5).
constexpr int64_t kTiledAhead = 8192;

// Prefetches while a tile computes block b: the next tile's packed rows for block b (row-major:
// contiguous, nt * 32 bytes; a tile's rows are too short, K / 2 bytes each, for the hardware
// prefetcher to lock on before they end; tiled: the tile's own stream kTiledAhead bytes on, which
// runs into the next tile) into L2, and the next tile's scales and biases into L1.
inline void prefetch_next(const QuantWeight& w, const PackedRows& pr, int64_t sb_row, int64_t nt, int64_t n0, int64_t b) {
  const int64_t n_next = n0 + nt;
  if (pr.tiled) {
    if (b % 2 == 0) {
      const char* p = reinterpret_cast<const char*>(pr.block(n0, b)) + kTiledAhead;
      for (int l = 0; l < nt * 64; l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
    }
  } else {
    const char* p = reinterpret_cast<const char*>(pr.packed + n_next * pr.row_bytes) + b * nt * 32;
    for (int l = 0; l < nt * 32; l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
  }
  if (b * 64 < nt * sb_row) {
    _mm_prefetch(reinterpret_cast<const char*>(w.scales.data()) + n_next * sb_row + b * 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w.biases.data()) + n_next * sb_row + b * 64, _MM_HINT_T0);
  }
}

// Bias term of weight row n for activation row m: sum over groups of b_g * sum_g(x).
inline float bias_term(const QuantWeight& w, const Q4Acts& acts, int64_t m, int64_t n) {
  const int64_t groups = w.cols / w.group_size;
  const DType st = w.biases.dtype();
  const float* gs = acts.gsum + m * groups;
  __m256 bv = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) bv = _mm256_fmadd_ps(load8_sb(w.biases.data(), st, n * groups + g), _mm256_loadu_ps(gs + g), bv);
  float bsum = hsum(bv);
  for (; g < groups; ++g) bsum += load1_sb(w.biases.data(), st, n * groups + g) * gs[g];
  return bsum;
}

// The tiles of weight rows [n0, n1) for activation rows m0.. (MT of them): NT rows at a time
// (each but the last prefetching the next), then single rows. K::tile<MT, NT>(m0, n0, prefetch)
// is the kernel's tile.
template <int MT, int NT, class K>
inline void tile_rows(const K& k, int64_t m0, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + NT <= n1; n += NT) k.template tile<MT, NT>(m0, n, n + 2 * NT <= n1);
  for (; n < n1; ++n) k.template tile<MT, 1>(m0, n, false);
}

// Both kernels' walk over weight rows [n0, n1): column blocks of 32 rows when x has more than 4
// rows (a block's packed rows stay in cache while every row tile of x passes over it), row tiles
// of 4, 2, then 1 activation rows (NT weight rows per tile: N1 for one row, N24 for 2 and 4).
template <int N1, int N24, class K>
inline void walk_tiles(const K& k, int64_t m_rows, int64_t n0, int64_t n1) {
  const int64_t nb = m_rows > 4 ? 32 : n1 - n0;
  for (int64_t c0 = n0; c0 < n1; c0 += nb) {
    const int64_t c1 = std::min(n1, c0 + nb);
    int64_t m = 0;
    for (; m + 4 <= m_rows; m += 4) tile_rows<4, N24>(k, m, c0, c1);
    for (; m + 2 <= m_rows; m += 2) tile_rows<2, N24>(k, m, c0, c1);
    if (m < m_rows) tile_rows<1, N1>(k, m, c0, c1);
  }
}

}  // namespace
}  // namespace mlxb::cpu::qmm
