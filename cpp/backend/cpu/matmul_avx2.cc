// AVX2 + FMA matmul kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
// - gemv: M <= 4 rows of activations (decode). Threads split the N weight rows; each row of w
//   is streamed once, converted to float32 in registers and FMA'd against the x rows (kept in
//   L1), so the speed is the memory bandwidth of reading w.
//   bf16 weights take a cheaper route: 16 weights are one 32-byte load, and their float32 values
//   are that register shifted left by 16 bits (even elements) and masked to the high halves (odd
//   elements), with x reordered once per call to match ([8 even, 8 odd] per 16).
// - gemm: larger M (prefill, batched decode). The same per-output computation as the GEMV, so a
//   row's result is bit for bit the same whatever M is (batch invariance: the engine fuses
//   sequences into one matmul and must give each the logits it gets alone). bf16 (gemm_bf16):
//   per thread a block of weight rows is converted once to float32 in the GEMV's lane order, and
//   5 x 2 tiles of (activation rows x weight rows) run the GEMV's FMA chains over 512-column
//   chunks (activation chunks stay in L1, accumulators parked between chunks), rows padded off
//   4 KB strides. Single thread, 512x2048x2048, noisy VM: 45-59 GFLOP/s, vs 35-42 for the
//   GEMV-per-4-rows form it replaces and 41-62 for the earlier packed 6x16 kernel (not batch
//   invariant). f32/f16 weights: gemm_rows (GEMV rows per 4 activation rows).
// Both accumulate in float32 with FMA; only the summation order differs from the reference, and
// it depends on the output's column and K only, never on M.
#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/next_block.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/simd_avx2.h"
#include "core/thread_pool.h"

namespace mlxb::cpu::avx2 {
namespace {

// y[m, n0 + r] for RB weight rows starting at row n0, M activation rows; `next` as NextBlock.
template <DType T, int M, int RB>
void gemv_rows(const float* x, const void* w, const float* bias, float* y, int64_t n0, int64_t n, int64_t k,
               const char* next = nullptr) {
  const int64_t es = dtype_size(T);
  NextBlock pf(next, RB * k * es, k / 8);
  const char* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = static_cast<const char*>(w) + (n0 + r) * k * es;
  __m256 acc[M][RB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t p = 0; p < k8; p += 8) {
    pf.step();
    __m256 wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = load8<T>(wr[r], p);
    for (int m = 0; m < M; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * k + p);
      for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) {
      float s = hsum(acc[m][r]);
      for (int64_t p = k8; p < k; ++p) s += x[m * k + p] * load1<T>(wr[r], p);
      y[m * n + n0 + r] = s + (bias ? bias[n0 + r] : 0.0f);
    }
}

template <DType T, int M>
void gemv_t(const float* x, const void* w, const float* bias, float* y, int64_t n, int64_t k) {
  constexpr int RB = M <= 2 ? 4 : 2;
  gemv_blocks<RB>(
      w, n, k, dtype_size(T), [=](int64_t r0, const char* next) { gemv_rows<T, M, RB>(x, w, bias, y, r0, n, k, next); },
      [=](int64_t r) { gemv_rows<T, M, 1>(x, w, bias, y, r, n, k); });
}

// bf16 GEMV: xs is x with each 16-element block as [8 even, 8 odd] (k16 = k rounded down to 16;
// the tail past k16 stays in natural order in x). Per output one accumulator chain: per 16
// columns acc = fma(x_even, w_even, acc), then acc = fma(x_odd, w_odd, acc); then the horizontal
// sum, the tail in order, the bias. gemm_bf16_tile does exactly this too (batch invariance).
template <int M, int RB>
void gemv_bf16_rows(const float* x, const float* xs, const uint16_t* w, const float* bias, float* y, int64_t n0, int64_t n,
                    int64_t k, const char* next = nullptr) {
  NextBlock pf(next, RB * k * 2, k / 16);  // the following block's weights (see NextBlock)
  const uint16_t* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = w + (n0 + r) * k;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[M][RB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t k16 = k & ~int64_t{15};
  for (int64_t p = 0; p < k16; p += 16) {
    pf.step();
    __m256 xe[M], xo[M];
    for (int m = 0; m < M; ++m) {
      xe[m] = _mm256_loadu_ps(xs + m * k + p);
      xo[m] = _mm256_loadu_ps(xs + m * k + p + 8);
    }
    for (int r = 0; r < RB; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + p));
      const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
      for (int m = 0; m < M; ++m) acc[m][r] = _mm256_fmadd_ps(xo[m], wo, _mm256_fmadd_ps(xe[m], we, acc[m][r]));
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) {
      float s = hsum(acc[m][r]);
      for (int64_t p = k16; p < k; ++p) s += x[m * k + p] * load1<DType::BF16>(wr[r], p);
      y[m * n + n0 + r] = s + (bias ? bias[n0 + r] : 0.0f);
    }
}

// x rows with every 16-block split into its even and odd elements (the weights' lane order).
// ld: the row stride of the result (>= k).
const float* split_even_odd(const float* x, int64_t m_count, int64_t k, int64_t ld) {
  float* xs = scratch<float>(static_cast<size_t>(m_count * ld), 0);
  const int64_t k16 = k & ~int64_t{15};
  const __m256i even_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t m = 0; m < m_count; ++m)
    for (int64_t p = 0; p < k16; p += 16) {
      const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p), even_first);      // e0..e3 o0..o3
      const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p + 8), even_first);  // e4..e7 o4..o7
      _mm256_storeu_ps(xs + m * ld + p, _mm256_permute2f128_ps(a, b, 0x20));
      _mm256_storeu_ps(xs + m * ld + p + 8, _mm256_permute2f128_ps(a, b, 0x31));
    }
  return xs;
}

template <int M>
void gemv_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t n, int64_t k) {
  const float* xs = split_even_odd(x, M, k, k);
  // M * RB independent accumulator chains hide the FMA latency; registers: M * RB + 2 * M.
  constexpr int RB = M == 1 ? 8 : M == 2 ? 4 : M == 3 ? 2 : 1;
  const int64_t blocks = (n + RB - 1) / RB;
  const bool short_rows = k * 2 <= kShortRowBytes;  // see NextBlock
  parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * RB;
      if (r0 + RB <= n) {
        const bool pf = short_rows && r0 + 2 * RB <= n;
        gemv_bf16_rows<M, RB>(x, xs, w, bias, y, r0, n, k, pf ? reinterpret_cast<const char*>(w + (r0 + RB) * k) : nullptr);
      } else {
        for (int64_t r = r0; r < n; ++r) gemv_bf16_rows<M, 1>(x, xs, w, bias, y, r, n, k);
      }
    }
  });
}

template <DType T>
void gemv_m(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  if constexpr (T == DType::BF16) {
    const uint16_t* wb = static_cast<const uint16_t*>(w);
    switch (m) {
      case 1: gemv_bf16<1>(x, wb, bias, y, n, k); return;
      case 2: gemv_bf16<2>(x, wb, bias, y, n, k); return;
      case 3: gemv_bf16<3>(x, wb, bias, y, n, k); return;
      default: gemv_bf16<4>(x, wb, bias, y, n, k); return;
    }
  }
  switch (m) {
    case 1: gemv_t<T, 1>(x, w, bias, y, n, k); break;
    case 2: gemv_t<T, 2>(x, w, bias, y, n, k); break;
    case 3: gemv_t<T, 3>(x, w, bias, y, n, k); break;
    default: gemv_t<T, 4>(x, w, bias, y, n, k); break;
  }
}

// Batch-invariant GEMM for M > 4, f32 / f16 weights (bf16 has gemm_bf16 below): every output
// computed exactly as the GEMV computes it (same per-lane FMA chains, horizontal sum, tail and
// bias). Threads split N into blocks of weight rows small enough to stay in L2 while every 4-row
// slice of x sweeps them.
template <DType T, int M>
void rows_block(const float* x, const void* w, const float* bias, float* y, int64_t r0, int64_t r1, int64_t n, int64_t k) {
  constexpr int RB = 3;
  int64_t r = r0;
  for (; r + RB <= r1; r += RB) gemv_rows<T, M, RB>(x, w, bias, y, r, n, k);
  for (; r < r1; ++r) gemv_rows<T, M, 1>(x, w, bias, y, r, n, k);
}

constexpr int kGemmMT = 5;  // 5 x 2 tile: 10 accumulators + 4 weight vectors + 1 x vector

// bf16 GEMM with the GEMV's arithmetic. Per thread, a block of weight rows is converted once to
// float32 in the GEMV's lane order ([8 even, 8 odd] per 16 columns: exactly the we / wo vectors
// gemv_bf16_rows forms), then MT activation rows x RT weight rows are accumulated with the same
// FMA chain, horizontal sum, tail and bias as gemv_bf16_rows: every output is bit for
// bit the GEMV's, whatever M (batch invariance), while the conversion is paid once per block
// instead of once per activation row.
// Columns [p0, p1) of an MT x RT tile. The accumulators live in `saved` (MT * RT vectors)
// between column chunks: storing and reloading a float vector is exact, so each output's FMA chain
// is the GEMV's. `last`: finish the outputs (horizontal sum, tail, bias) into y.
template <int MT, int RT>
void gemm_bf16_tile(const float* x, const float* xs, const float* wp, const uint16_t* w, const float* bias, float* y,
                    int64_t m0, int64_t r0, int64_t n, int64_t k, int64_t k16, int64_t ld, int64_t p0, int64_t p1,
                    float* saved, int64_t wld) {
  __m256 acc[MT][RT];
  for (int i = 0; i < MT; ++i)
    for (int r = 0; r < RT; ++r) acc[i][r] = p0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(saved + (i * RT + r) * 8);
  for (int64_t p = p0; p < p1; p += 16) {
    __m256 we[RT], wo[RT];
    for (int r = 0; r < RT; ++r) {
      we[r] = _mm256_load_ps(wp + r * wld + (p - p0));
      wo[r] = _mm256_load_ps(wp + r * wld + (p - p0) + 8);
    }
    for (int i = 0; i < MT; ++i) {
      // Load each x vector once into a register (the empty asm keeps the compiler from folding
      // the load into every FMA, which would load it RT times).
      __m256 xe = _mm256_loadu_ps(xs + (m0 + i) * ld + p);
      asm("" : "+x"(xe));
      for (int r = 0; r < RT; ++r) acc[i][r] = _mm256_fmadd_ps(xe, we[r], acc[i][r]);
      __m256 xo = _mm256_loadu_ps(xs + (m0 + i) * ld + p + 8);
      asm("" : "+x"(xo));
      for (int r = 0; r < RT; ++r) acc[i][r] = _mm256_fmadd_ps(xo, wo[r], acc[i][r]);
    }
  }
  if (p1 < k16) {
    for (int i = 0; i < MT; ++i)
      for (int r = 0; r < RT; ++r) _mm256_store_ps(saved + (i * RT + r) * 8, acc[i][r]);
    return;
  }
  for (int i = 0; i < MT; ++i)
    for (int r = 0; r < RT; ++r) {
      float s = hsum(acc[i][r]);
      for (int64_t p = k16; p < k; ++p) s += x[(m0 + i) * k + p] * load1<DType::BF16>(w + (r0 + r) * k, p);
      y[(m0 + i) * n + r0 + r] = s + (bias ? bias[r0 + r] : 0.0f);
    }
}

constexpr int64_t kChunkMax = 512;  // columns per chunk: MT x rows of 2 KB stay in L1

// MT activation rows against weight rows [r0, r1) (packed in wp chunk-major: [chunks][rows][chunk +
// 16], rows padded by one cache line): per column chunk, the MT x chunk rows (L1) sweep every
// weight pair of the block, accumulators parked in `saved`.
template <int MT>
void gemm_bf16_rows(const float* x, const float* xs, const float* wp, const uint16_t* w, const float* bias, float* y,
                    int64_t m0, int64_t r0, int64_t r1, int64_t n, int64_t k, int64_t k16, int64_t ld, float* saved) {
  const int64_t kChunk = std::min(kChunkMax, std::max<int64_t>(k16, 16)), wld = kChunk + 16;
  for (int64_t p0 = 0; p0 < std::max<int64_t>(k16, 1); p0 += kChunk) {
    const int64_t p1 = std::min(k16, p0 + kChunk);
    const float* wc = wp + (p0 / kChunk) * (r1 - r0) * wld;  // this chunk: [row][kChunk], contiguous
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2)
      gemm_bf16_tile<MT, 2>(x, xs, wc + (r - r0) * wld, w, bias, y, m0, r, n, k, k16, ld, p0, p1, saved + (r - r0) * MT * 8, wld);
    for (; r < r1; ++r)
      gemm_bf16_tile<MT, 1>(x, xs, wc + (r - r0) * wld, w, bias, y, m0, r, n, k, k16, ld, p0, p1, saved + (r - r0) * MT * 8, wld);
  }
}

void gemm_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const int64_t k16 = k & ~int64_t{15};
  // Row strides of the split activations and packed weights: k16 plus one cache line, so the
  // rows a tile reads at once do not all fall into the same L1 set (a 4 KB-multiple stride would).
  const int64_t ld = k16 + 16;
  const float* xs = split_even_odd(x, m, k, ld);
  // Weight block: about 256 KB of float32 (L2), and at least two blocks per thread so that small
  // matrices (a tiny model's 128-row k/v projections) keep every core busy. The block size does
  // not change any output's summation order.
  const int64_t nb_l2 = std::max<int64_t>(2, (int64_t{256} * 1024 / (4 * ld)) / 2 * 2);
  const int64_t nb_spread = ((n + 2 * num_threads() - 1) / (2 * num_threads()) + 1) / 2 * 2;
  const int64_t nb = std::max<int64_t>(2, std::min(nb_l2, nb_spread));
  const int64_t blocks = (n + nb - 1) / nb;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t kChunk = std::min(kChunkMax, std::max<int64_t>(k16, 16)), wld = kChunk + 16;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    // Packed block [chunks][rows][chunk + 16] (the last chunk may be short, but chunks are laid
    // out at full size), then the parked accumulators.
    const int64_t wsize = ((k16 + kChunk - 1) / kChunk) * nb * wld;
    float* wp = scratch<float>(static_cast<size_t>(wsize + nb * kGemmMT * 8 + 8), 1);
    float* saved = wp + wsize;  // 32-byte aligned: wsize is a multiple of 256
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * nb, r1 = std::min(n, r0 + nb);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t p = 0; p < k16; p += 16) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * k + p));
          float* d = wp + (p / kChunk) * (r1 - r0) * wld + (r - r0) * wld + p % kChunk;
          _mm256_store_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
          _mm256_store_ps(d + 8, _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)));
        }
      int64_t m0 = 0;
      for (; m0 + kGemmMT <= m; m0 += kGemmMT) gemm_bf16_rows<kGemmMT>(x, xs, wp, w, bias, y, m0, r0, r1, n, k, k16, ld, saved);
      for (; m0 < m; ++m0) gemm_bf16_rows<1>(x, xs, wp, w, bias, y, m0, r0, r1, n, k, k16, ld, saved);
    }
  });
}

template <DType T>
void gemm_rows(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  if constexpr (T == DType::BF16) {
    gemm_bf16(x, static_cast<const uint16_t*>(w), bias, y, m, n, k);
    return;
  }
  const int64_t row_bytes = std::max<int64_t>(1, k * dtype_size(T));
  const int64_t nb = std::max<int64_t>(6, (int64_t{192} * 1024 / row_bytes) / 6 * 6);
  const int64_t blocks = (n + nb - 1) / nb;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * nb, r1 = std::min(n, r0 + nb);
      for (int64_t m0 = 0; m0 < m; m0 += 4) {
        const float* xm = x + m0 * k;
        float* ym = y + m0 * n;
        switch (std::min<int64_t>(4, m - m0)) {
          case 1: rows_block<T, 1>(xm, w, bias, ym, r0, r1, n, k); break;
          case 2: rows_block<T, 2>(xm, w, bias, ym, r0, r1, n, k); break;
          case 3: rows_block<T, 3>(xm, w, bias, ym, r0, r1, n, k); break;
          default: rows_block<T, 4>(xm, w, bias, ym, r0, r1, n, k); break;
        }
      }
    }
  });
}

}  // namespace

void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  if (m <= 4) {
    switch (wt) {
      case DType::F32: gemv_m<DType::F32>(x, w, bias, y, m, n, k); return;
      case DType::BF16: gemv_m<DType::BF16>(x, w, bias, y, m, n, k); return;
      default: gemv_m<DType::F16>(x, w, bias, y, m, n, k); return;
    }
  }
  switch (wt) {
    case DType::F32: gemm_rows<DType::F32>(x, w, bias, y, m, n, k); return;
    case DType::BF16: gemm_rows<DType::BF16>(x, w, bias, y, m, n, k); return;
    default: gemm_rows<DType::F16>(x, w, bias, y, m, n, k); return;
  }
}

}  // namespace mlxb::cpu::avx2
