// AVX-512 matmul kernels (this file alone is compiled with AVX-512 F/BW/VL/DQ/BF16 flags; it is
// only called when cpu_features() reports F/BW/DQ/VL, and the vdpbf16ps path only with BF16).
// - gemv (M <= 4, decode): as the AVX2 one, 16 lanes wide; weights converted exactly to float32.
// - gemm (M > 4): the GEMV's per-output computation over blocks of weight rows (gemm_rows), so a
//   row's result does not depend on M (batch invariance; the dispatcher always takes this one).
// - bf16-dot gemm (only when asked, use_bf16_dot): activations are rounded to bf16 (round to
//   nearest even) and multiplied with vdpbf16ps, which accumulates pairs of products in float32 -
//   the precision torch uses for a bf16 model. Panel layout: [k/2][32 columns] of bf16 pairs;
//   register tile 12 x 32 (24 zmm accumulators); x packed in 12-row strips. Not batch-invariant
//   (M <= 4 takes the GEMV), so the dispatcher does not use it.
#include <immintrin.h>

// GCC 12's AVX-512 conversion intrinsics start from an "undefined" register and trip
// -Wuninitialized when inlined (a false positive in the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/scratch.h"
#include "core/thread_pool.h"

namespace mlxb::cpu::avx512 {
namespace {

template <DType T>
inline __m512 load16(const void* base, int64_t i) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (T == DType::BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  }
}

template <DType T>
inline float load1(const void* base, int64_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(base)[i];
  else if constexpr (T == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// ---------------------------------------------------------------- gemv
template <DType T, int M, int RB>
void gemv_rows(const float* x, const void* w, const float* bias, float* y, int64_t n0, int64_t n, int64_t k) {
  const int64_t es = dtype_size(T);
  const char* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = static_cast<const char*>(w) + (n0 + r) * k * es;
  __m512 acc[M][RB];
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_setzero_ps();
  const int64_t k16 = k & ~int64_t{15};
  for (int64_t p = 0; p < k16; p += 16) {
    __m512 wv[RB];
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) wv[r] = load16<T>(wr[r], p);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * k + p);
#pragma GCC unroll 16
      for (int r = 0; r < RB; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      float s = hsum16(acc[m][r]);
      for (int64_t p = k16; p < k; ++p) s += x[m * k + p] * load1<T>(wr[r], p);
      y[m * n + n0 + r] = s + (bias ? bias[n0 + r] : 0.0f);
    }
}

template <DType T, int M>
void gemv_t(const float* x, const void* w, const float* bias, float* y, int64_t n, int64_t k) {
  constexpr int RB = M <= 2 ? 4 : 2;
  const int64_t blocks = (n + RB - 1) / RB;
  parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * RB;
      if (r0 + RB <= n) {
        gemv_rows<T, M, RB>(x, w, bias, y, r0, n, k);
      } else {
        for (int64_t r = r0; r < n; ++r) gemv_rows<T, M, 1>(x, w, bias, y, r, n, k);
      }
    }
  });
}

template <DType T>
void gemv_m(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  switch (m) {
    case 1: gemv_t<T, 1>(x, w, bias, y, n, k); break;
    case 2: gemv_t<T, 2>(x, w, bias, y, n, k); break;
    case 3: gemv_t<T, 3>(x, w, bias, y, n, k); break;
    default: gemv_t<T, 4>(x, w, bias, y, n, k); break;
  }
}

// Batch-invariant GEMM for M > 4 (see the AVX2 file): every output computed exactly as the GEMV
// computes it, over blocks of weight rows that stay in L2 while every 4-row slice of x sweeps them.
template <DType T, int M>
void rows_block(const float* x, const void* w, const float* bias, float* y, int64_t r0, int64_t r1, int64_t n,
                int64_t k) {
  constexpr int RB = 4;
  int64_t r = r0;
  for (; r + RB <= r1; r += RB) gemv_rows<T, M, RB>(x, w, bias, y, r, n, k);
  for (; r < r1; ++r) gemv_rows<T, M, 1>(x, w, bias, y, r, n, k);
}

template <DType T>
void gemm_rows(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const int64_t row_bytes = std::max<int64_t>(1, k * dtype_size(T));
  const int64_t nb = std::max<int64_t>(8, (int64_t{256} * 1024 / row_bytes) / 8 * 8);
  const int64_t blocks = (n + nb - 1) / nb;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * nb, r1 = std::min(n, r0 + nb);
      for (int64_t m0 = 0; m0 < m; m0 += 4) {
        const float* xs = x + m0 * k;
        float* ys = y + m0 * n;
        switch (std::min<int64_t>(4, m - m0)) {
          case 1: rows_block<T, 1>(xs, w, bias, ys, r0, r1, n, k); break;
          case 2: rows_block<T, 2>(xs, w, bias, ys, r0, r1, n, k); break;
          case 3: rows_block<T, 3>(xs, w, bias, ys, r0, r1, n, k); break;
          default: rows_block<T, 4>(xs, w, bias, ys, r0, r1, n, k); break;
        }
      }
    }
  });
}

// ---------------------------------------------------------------- bf16-dot gemm
constexpr int kMR = 12, kNR = 32;
constexpr int64_t kKC = 256;   // k per block (even)
constexpr int64_t kPanels = 16;  // panels packed per chunk: 16 x 32 columns

// Writes the 12 x 32 tile `acc` (float32) into c (ldc), adding to c unless `first`, where the
// bias (if any) is added instead.
template <int MR>
inline void store_tile(const __m512 (&acc)[kMR][2], float* c, int64_t ldc, int64_t ncols, bool first, const float* bias) {
  alignas(64) float bias_t[kNR] = {};
  if (first && bias) std::memcpy(bias_t, bias, static_cast<size_t>(ncols) * sizeof(float));
  const __mmask16 m0 = ncols >= 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= 32 ? __mmask16(0xffff) : ncols <= 16 ? __mmask16(0) : __mmask16((1u << (ncols - 16)) - 1);
  const __m512 b0 = _mm512_load_ps(bias_t), b1 = _mm512_load_ps(bias_t + 16);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    const __m512 c0 = first ? b0 : _mm512_maskz_loadu_ps(m0, ci);
    const __m512 c1 = first ? b1 : _mm512_maskz_loadu_ps(m1, ci + 16);
    _mm512_mask_storeu_ps(ci, m0, _mm512_add_ps(c0, acc[i][0]));
    _mm512_mask_storeu_ps(ci + 16, m1, _mm512_add_ps(c1, acc[i][1]));
  }
}

// bf16 pair-dot micro-kernel: xp [kc/2][12] uint32 (bf16 pairs), panel [kc/2][32] uint32.
template <int MR>
void micro_bf16(const uint32_t* xp, const uint32_t* panel, int64_t kp, float* c, int64_t ldc, int64_t ncols, bool first,
                const float* bias) {
  __m512 acc[kMR][2];
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(panel + p * kNR);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(panel + p * kNR + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[p * kMR + i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
    }
  }
  store_tile<MR>(acc, c, ldc, ncols, first, bias);
}

using MicroBf16 = void (*)(const uint32_t*, const uint32_t*, int64_t, float*, int64_t, int64_t, bool, const float*);
constexpr MicroBf16 kMicroBf16[kMR + 1] = {nullptr, micro_bf16<1>, micro_bf16<2>, micro_bf16<3>, micro_bf16<4>,
                                           micro_bf16<5>, micro_bf16<6>, micro_bf16<7>, micro_bf16<8>, micro_bf16<9>,
                                           micro_bf16<10>, micro_bf16<11>, micro_bf16<12>};

// Number of k-pairs in a block of kc values (the odd tail is padded with a zero).
inline int64_t pairs(int64_t kc) { return (kc + 1) / 2; }

// The pair (v[2p], v[2p+1]) of a bf16 row of length kc as a uint32 (second half zero past kc).
inline uint32_t bf16_pair(const uint16_t* v, int64_t p, int64_t kc) {
  const uint32_t lo = v[2 * p];
  const uint32_t hi = 2 * p + 1 < kc ? v[2 * p + 1] : 0;
  return lo | (hi << 16);
}

// x [m, k] float32 -> blocks [k / kc][m / 12][pairs(kc)][12] of rounded bf16 pairs.
const uint32_t* pack_x_bf16(const float* x, int64_t m, int64_t k) {
  const int64_t mb = (m + kMR - 1) / kMR;
  const int64_t kp_total = [&] {
    int64_t t = 0;
    for (int64_t k0 = 0; k0 < k; k0 += kKC) t += pairs(std::min<int64_t>(kKC, k - k0));
    return t;
  }();
  uint32_t* xp = scratch<uint32_t>(static_cast<size_t>(mb * kMR * kp_total), 0);
  parallel_for(mb, 2, [&](int64_t b0, int64_t b1) {
    std::vector<uint16_t> row(static_cast<size_t>(kKC));
    for (int64_t b = b0; b < b1; ++b) {
      int64_t off = 0;  // pairs before this k block
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min<int64_t>(kKC, k - k0), kp = pairs(kc);
        uint32_t* dst = xp + off * mb * kMR + b * kp * kMR;
        for (int i = 0; i < kMR; ++i) {
          const int64_t r = b * kMR + i;
          if (r < m) {
            for (int64_t j = 0; j < kc; ++j) row[j] = f32_to_bf16(x[r * k + k0 + j]);
            for (int64_t p = 0; p < kp; ++p) dst[p * kMR + i] = bf16_pair(row.data(), p, kc);
          } else {
            for (int64_t p = 0; p < kp; ++p) dst[p * kMR + i] = 0;
          }
        }
        off += kp;
      }
    }
  });
  return xp;
}

// w rows n0 .. n0+32, columns k0 .. k0+kc, bf16 -> [pairs(kc)][32] uint32; rows past n are zero.
void pack_panel_bf16(const uint16_t* w, int64_t n0, int64_t n, int64_t k, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = pairs(kc), rows = std::min<int64_t>(kNR, n - n0);
  if (rows < kNR) std::memset(dst, 0, static_cast<size_t>(kp * kNR) * sizeof(uint32_t));
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* src = w + (n0 + r) * k + k0;
    for (int64_t p = 0; p < kp; ++p) dst[p * kNR + r] = bf16_pair(src, p, kc);
  }
}

void gemm_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const uint32_t* xp = pack_x_bf16(x, m, k);
  const int64_t mb = (m + kMR - 1) / kMR;
  const int64_t panels = (n + kNR - 1) / kNR;
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    uint32_t* packed = scratch<uint32_t>(static_cast<size_t>(kPanels * (kKC / 2) * kNR), 1);
    for (int64_t c0 = p0; c0 < p1; c0 += kPanels) {
      const int64_t c1 = std::min(p1, c0 + kPanels);
      int64_t off = 0;
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min<int64_t>(kKC, k - k0), kp = pairs(kc);
        for (int64_t pi = c0; pi < c1; ++pi) pack_panel_bf16(w, pi * kNR, n, k, k0, kc, packed + (pi - c0) * (kKC / 2) * kNR);
        const uint32_t* xb = xp + off * mb * kMR;
        for (int64_t b = 0; b < mb; ++b) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, m - b * kMR));
          for (int64_t pi = c0; pi < c1; ++pi) {
            const int64_t n0 = pi * kNR, ncols = std::min<int64_t>(kNR, n - n0);
            kMicroBf16[mr](xb + b * kp * kMR, packed + (pi - c0) * (kKC / 2) * kNR, kp, y + b * kMR * n + n0, n, ncols,
                           k0 == 0, bias ? bias + n0 : nullptr);
          }
        }
        off += kp;
      }
    }
  });
}

}  // namespace

void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
            bool use_bf16_dot) {
  if (m <= 4) {
    switch (wt) {
      case DType::F32: gemv_m<DType::F32>(x, w, bias, y, m, n, k); return;
      case DType::BF16: gemv_m<DType::BF16>(x, w, bias, y, m, n, k); return;
      default: gemv_m<DType::F16>(x, w, bias, y, m, n, k); return;
    }
  }
  switch (wt) {
    case DType::F32: gemm_rows<DType::F32>(x, w, bias, y, m, n, k); return;
    case DType::BF16:
      if (use_bf16_dot) gemm_bf16(x, static_cast<const uint16_t*>(w), bias, y, m, n, k);
      else gemm_rows<DType::BF16>(x, w, bias, y, m, n, k);
      return;
    default: gemm_rows<DType::F16>(x, w, bias, y, m, n, k); return;
  }
}

}  // namespace mlxb::cpu::avx512
