// Batch-invariant GEMV (M <= 4) and register-tiled GEMM (M > 4) that compute every output in one
// fixed order, generic over a vector-ops type V (matmul_avx512.cc instantiates it with AVX-512
// registers; the native kernel test with a plain-array model of them, so the tiling logic is
// checked on any CPU). With S = V::kStep activation/weight elements per vector step and
// kv = K rounded down to S, output y[i, j] is, for every M and either kernel:
//   acc = V::zero();  for p = 0, S, 2S, ... < kv:  acc = V::madd(acc, x[i, p..p+S), w[j, p..p+S))
//   s = V::hsum(acc);  for p = kv .. K-1:  s = fma(V::round_x(x[i, p]), w[j, p], s)
//   y[i, j] = s + (bias ? bias[j] : 0)
// so a row's result is bit for bit independent of M and of the other rows (the engine fuses
// sequences into one matmul and must give each the logits it gets alone). Activations are first
// packed by V::pack_x (a copy, or bf16 rounding) into rows padded by one cache line.
//
// GEMM: threads take blocks of weight rows; a block is packed once by V::pack_w (weights made
// ready for the vector unit: converted to float32, or copied) chunk-major, [chunk][row][kChunk +
// pad], about kBlockBytes, so it stays in L2 while every MT-row strip of activations sweeps it.
// Per strip and column chunk (MT activation rows x kChunk, in L1) every RT-row weight tile of the
// block accumulates MT x RT register accumulators (V::kMT x V::kRT, sized to the register file);
// between chunks they are parked in memory (storing and reloading a vector is exact, so each
// output's chain is unchanged).
//
// Weights come in one of two layouts, chosen by the template parameter Blk; both give the same
// bits, only the addresses differ:
// - rows (Blk = false): row-major [N, K].
// - blocks of four rows (Blk = true, weight_layout.cc; bf16-dot mode only, N % 4 == 0,
//   K % 32 == 0): rows 4b..4b+3 occupy the same 4K elements as in the row-major layout, ordered
//   [K / 32][4][32], so the GEMV's four row streams are one sequential stream of memory.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/next_block.h"
#include "backend/cpu/scratch.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace mlxb::cpu::ordered {

template <DType T>
inline float weight_at(const void* base, int64_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(base)[i];
  else if constexpr (T == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

// Element offset of weight (row, p) in layout Blk; p is a multiple of 32 when Blk.
template <bool Blk>
inline int64_t w_offset(int64_t row, int64_t p, int64_t k) {
  if constexpr (Blk) return (row >> 2) * 4 * k + (p >> 5) * 128 + (row & 3) * 32;
  else return row * k + p;
}

// The scalar end of every output: horizontal sum already in s; the K tail; the bias.
template <class V, DType T>
inline float finish(float s, const float* x_row, const void* w_row, int64_t kv, int64_t k, const float* bias_j) {
  for (int64_t p = kv; p < k; ++p) s = std::fma(V::round_x(x_row[p]), weight_at<T>(w_row, p), s);
  return s + (bias_j ? *bias_j : 0.0f);
}

template <class V>
constexpr int64_t pad_elems() {  // one cache line of packed activations / weights
  return 64 / static_cast<int64_t>(sizeof(typename V::xin_t));
}

// x [m, k] -> V::xin_t rows of ld elements (the first kv of each packed; the tail stays in x).
template <class V>
const typename V::xin_t* pack_rows(const float* x, int64_t m, int64_t k, int64_t kv, int64_t ld) {
  auto* xp = scratch<typename V::xin_t>(static_cast<size_t>(m * ld), 0);
  for (int64_t i = 0; i < m; ++i) V::pack_x(x + i * k, kv, xp + i * ld);
  return xp;
}

// ---------------------------------------------------------------- GEMV, M <= 4
template <class V, DType T, int M, int RB, bool Blk = false>
void gemv_rows(const float* x, const typename V::xin_t* xp, int64_t ld, const void* w, const float* bias, float* y,
               int64_t n0, int64_t n, int64_t k, const char* next = nullptr) {
  constexpr int S = V::kStep;
  static_assert(!Blk || (S == 32 && RB == 4), "the four-row block layout is read 32 elements of 4 rows at a time");
  const int64_t kv = k / S * S, es = dtype_size(T);
  NextBlock pf(next, RB * k * es, kv / S);  // the following block's weights (next_block.h)
  const char* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = static_cast<const char*>(w) + w_offset<Blk>(n0 + r, 0, k) * es;
  typename V::acc_t acc[M][RB];
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) acc[m][r] = V::zero();
  for (int64_t p = 0; p < kv; p += S) {
    pf.step();
    typename V::wv_t wv[RB];
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) wv[r] = V::template load_w<T>(wr[r], Blk ? (p >> 5) * 128 : p);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const typename V::xv_t xv = V::load_x(xp + m * ld + p);
#pragma GCC unroll 16
      for (int r = 0; r < RB; ++r) acc[m][r] = V::madd(acc[m][r], xv, wv[r]);
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r)
      y[m * n + n0 + r] = finish<V, T>(V::hsum(acc[m][r]), x + m * k, wr[r], kv, k, bias ? bias + n0 + r : nullptr);
}

// Blocks of four-row layout weights are always read four rows at a time (N % 4 == 0: no rest),
// without software prefetch: the hardware prefetcher follows their one stream (next_block.h is
// for the four streams of row-major rows; on top of the block layout it cost time).
template <class V, DType T, int M, bool Blk = false>
void gemv_t(const float* x, const void* w, const float* bias, float* y, int64_t n, int64_t k) {
  const int64_t kv = k / V::kStep * V::kStep, ld = kv + pad_elems<V>();
  const typename V::xin_t* xp = pack_rows<V>(x, M, k, kv, ld);
  constexpr int RB = Blk || M <= 2 ? 4 : 2;
  gemv_blocks<RB>(
      w, n, k, dtype_size(T),
      [=](int64_t r0, const char* next) { gemv_rows<V, T, M, RB, Blk>(x, xp, ld, w, bias, y, r0, n, k, Blk ? nullptr : next); },
      [=](int64_t r) { gemv_rows<V, T, M, 1>(x, xp, ld, w, bias, y, r, n, k); });
}

template <class V, DType T, bool Blk = false>
void gemv(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  switch (m) {
    case 1: gemv_t<V, T, 1, Blk>(x, w, bias, y, n, k); break;
    case 2: gemv_t<V, T, 2, Blk>(x, w, bias, y, n, k); break;
    case 3: gemv_t<V, T, 3, Blk>(x, w, bias, y, n, k); break;
    default: gemv_t<V, T, 4, Blk>(x, w, bias, y, n, k); break;
  }
}

// ---------------------------------------------------------------- GEMM, M > 4
constexpr int64_t kChunkBytes = 2048;           // activation columns per chunk: MT x 2 KB in L1
constexpr int64_t kBlockBytes = 512 * 1024;     // packed weight block (L2)

// Columns [p0, p1) of an MT x RT tile. xp: MT activation rows (stride ld); wp: RT packed weight
// rows of this chunk (stride wld, element 0 = column p0). Accumulators come from / go to `saved`
// unless this is the first / last chunk; after the last, sums[i * RT + r] = hsum.
template <class V, int MT, int RT>
void tile(const typename V::xin_t* xp, int64_t ld, const typename V::win_t* wp, int64_t wld, int64_t p0, int64_t p1,
          bool first, bool last, float* saved, float* sums) {
  constexpr int S = V::kStep, A = V::kAccFloats;
  typename V::acc_t acc[MT][RT];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int r = 0; r < RT; ++r) acc[i][r] = first ? V::zero() : V::load_acc(saved + (i * RT + r) * A);
  for (int64_t p = p0; p < p1; p += S) {
    typename V::wv_t wv[RT];
#pragma GCC unroll 16
    for (int r = 0; r < RT; ++r) wv[r] = V::load_packed_w(wp + r * wld + (p - p0));
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      typename V::xv_t xv = V::load_x(xp + i * ld + p);
      V::pin(xv);  // one load per x vector, not one folded into each of the RT madds
#pragma GCC unroll 16
      for (int r = 0; r < RT; ++r) acc[i][r] = V::madd(acc[i][r], xv, wv[r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int r = 0; r < RT; ++r) {
      if (last) sums[i * RT + r] = V::hsum(acc[i][r]);
      else V::store_acc(saved + (i * RT + r) * A, acc[i][r]);
    }
}

struct GemmShape {
  int64_t m, n, k, kv, ld, kc, chunks, wld;
};

// MT activation rows from m0 against the packed block of weight rows [r0, r1).
template <class V, DType T, int MT, bool Blk>
void strip(const float* x, const typename V::xin_t* xp, const typename V::win_t* wp, const void* w, const float* bias,
           float* y, const GemmShape& g, int64_t m0, int64_t r0, int64_t r1, float* saved) {
  constexpr int kRT = V::kRT;
  const int64_t rows = r1 - r0, es = dtype_size(T);
  const typename V::xin_t* xs = xp + m0 * g.ld;
  float sums[MT * kRT];
  auto out = [&](int rt, int64_t r) {
    for (int i = 0; i < MT; ++i)
      for (int q = 0; q < rt; ++q)
        y[(m0 + i) * g.n + r + q] = finish<V, T>(sums[i * rt + q], x + (m0 + i) * g.k,
                                                 static_cast<const char*>(w) + w_offset<Blk>(r + q, 0, g.k) * es, g.kv, g.k,
                                                 bias ? bias + r + q : nullptr);
  };
  for (int64_t c = 0; c < g.chunks; ++c) {
    const int64_t p0 = c * g.kc, p1 = std::min(g.kv, p0 + g.kc);
    const bool first = c == 0, last = c + 1 == g.chunks;
    const typename V::win_t* wc = wp + c * rows * g.wld;
    int64_t r = r0;
    for (; r + kRT <= r1; r += kRT) {
      tile<V, MT, kRT>(xs, g.ld, wc + (r - r0) * g.wld, g.wld, p0, p1, first, last, saved + (r - r0) * MT * V::kAccFloats, sums);
      if (last) out(kRT, r);
    }
    for (; r < r1; ++r) {
      tile<V, MT, 1>(xs, g.ld, wc + (r - r0) * g.wld, g.wld, p0, p1, first, last, saved + (r - r0) * MT * V::kAccFloats, sums);
      if (last) out(1, r);
    }
  }
}

template <class V, DType T, bool Blk = false>
void gemm(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  using win_t = typename V::win_t;
  static_assert(!Blk || V::kStep == 32, "the four-row block layout is packed 32 elements at a time");
  constexpr int kMT = V::kMT, kRT = V::kRT;  // register tile rows (activations) x columns (weights)
  GemmShape g;
  g.m = m; g.n = n; g.k = k;
  g.kv = k / V::kStep * V::kStep;
  if (g.kv == 0) {  // no vector part: the GEMV's computation per 4 rows is all there is
    for (int64_t m0 = 0; m0 < m; m0 += 4) gemv<V, T, Blk>(x + m0 * k, w, bias, y + m0 * n, std::min<int64_t>(4, m - m0), n, k);
    return;
  }
  g.ld = g.kv + pad_elems<V>();
  const typename V::xin_t* xp = pack_rows<V>(x, m, k, g.kv, g.ld);
  g.kc = std::min(g.kv, std::max<int64_t>(V::kStep, kChunkBytes / static_cast<int64_t>(sizeof(typename V::xin_t)) / V::kStep * V::kStep));
  g.chunks = (g.kv + g.kc - 1) / g.kc;
  g.wld = g.kc + 64 / static_cast<int64_t>(sizeof(win_t));
  const int64_t row_bytes = g.chunks * g.wld * static_cast<int64_t>(sizeof(win_t));
  // At least two blocks per thread, so that a small matrix does not leave a core idle (the block
  // size does not change any output's summation order).
  const int64_t spread = ((n + 2 * num_threads() - 1) / (2 * num_threads()) + kRT - 1) / kRT * kRT;
  const int64_t nb = std::max<int64_t>(kRT, std::min(kBlockBytes / row_bytes / kRT * kRT, spread));
  const int64_t blocks = (n + nb - 1) / nb;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    // Packed block, then the parked accumulators (64-byte aligned: the block is a multiple of 64 bytes).
    const int64_t wbytes = row_bytes * nb;
    char* buf = scratch<char>(static_cast<size_t>(wbytes + nb * kMT * V::kAccFloats * 4), 1);
    win_t* wp = reinterpret_cast<win_t*>(buf);
    float* saved = reinterpret_cast<float*>(buf + wbytes);
    const int64_t es = dtype_size(T);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * nb, r1 = std::min(n, r0 + nb), rows = r1 - r0;
      for (int64_t r = r0; r < r1; ++r) {
        const char* src = static_cast<const char*>(w) + w_offset<Blk>(r, 0, k) * es;
        for (int64_t c = 0; c < g.chunks; ++c) {
          const int64_t p0 = c * g.kc, p1 = std::min(g.kv, p0 + g.kc);
          win_t* dst = wp + c * rows * g.wld + (r - r0) * g.wld;
          for (int64_t p = p0; p < p1; p += V::kStep) V::template pack_w<T>(src, Blk ? (p >> 5) * 128 : p, dst + (p - p0));
        }
      }
      int64_t m0 = 0;
      for (; m0 + kMT <= m; m0 += kMT) strip<V, T, kMT, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved);
      static_assert(kMT <= 6, "strip tails below cover MT <= 6");
      switch (m - m0) {
        case 1: strip<V, T, 1, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved); break;
        case 2: strip<V, T, 2, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved); break;
        case 3: strip<V, T, 3, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved); break;
        case 4: strip<V, T, 4, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved); break;
        case 5: strip<V, T, 5, Blk>(x, xp, wp, w, bias, y, g, m0, r0, r1, saved); break;
        default: break;
      }
    }
  });
}

// y[M, N] = x[M, K] . w[N, K]^T (+ bias) in the order above, any M.
template <class V>
void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const bool small = m <= 4;
  switch (wt) {
    case DType::F32: small ? gemv<V, DType::F32>(x, w, bias, y, m, n, k) : gemm<V, DType::F32>(x, w, bias, y, m, n, k); return;
    case DType::BF16: small ? gemv<V, DType::BF16>(x, w, bias, y, m, n, k) : gemm<V, DType::BF16>(x, w, bias, y, m, n, k); return;
    default: small ? gemv<V, DType::F16>(x, w, bias, y, m, n, k) : gemm<V, DType::F16>(x, w, bias, y, m, n, k); return;
  }
}

}  // namespace mlxb::cpu::ordered
