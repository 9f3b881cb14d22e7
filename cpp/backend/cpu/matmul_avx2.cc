// AVX2 + FMA matmul kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
// - gemv: M <= 4 rows of activations (decode). Threads split the N weight rows; each row of w
//   is streamed once, converted to float32 in registers and FMA'd against the x rows (kept in
//   L1), so the speed is the memory bandwidth of reading w.
//   bf16 weights take a cheaper route: 16 weights are one 32-byte load, and their float32 values
//   are that register shifted left by 16 bits (even elements) and masked to the high halves (odd
//   elements), with x reordered once per call to match ([8 even, 8 odd] per 16).
// - gemm: larger M (prefill, batched decode). The same per-output computation as the GEMV (see
//   gemm_rows), so a row's result is bit for bit the same whatever M is (batch invariance: the
//   engine fuses sequences into one matmul and must give each the logits it gets alone). By CPU
//   time it measured as fast as the packed 6x16 GotoBLAS-style kernel it replaced (2026-11-29,
//   Llama-1B shapes, M=512: 121-130 vs 85-123 GFLOP/s per core).
// Both accumulate in float32 with FMA; only the summation order differs from the reference, and
// it depends on the output's column and K only, never on M.
#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/simd_avx2.h"
#include "core/thread_pool.h"

namespace mlxb::cpu::avx2 {
namespace {

// y[m, n0 + r] for RB weight rows starting at row n0, M activation rows.
template <DType T, int M, int RB>
void gemv_rows(const float* x, const void* w, const float* bias, float* y, int64_t n0, int64_t n, int64_t k) {
  const int64_t es = dtype_size(T);
  const char* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = static_cast<const char*>(w) + (n0 + r) * k * es;
  __m256 acc[M][RB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t p = 0; p < k8; p += 8) {
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

// bf16 GEMV: xs is x with each 16-element block as [8 even, 8 odd] (k16 = k rounded down to 16;
// the tail past k16 stays in natural order in x).
template <int M, int RB>
void gemv_bf16_rows(const float* x, const float* xs, const uint16_t* w, const float* bias, float* y, int64_t n0, int64_t n,
                    int64_t k) {
  const uint16_t* wr[RB];
  for (int r = 0; r < RB; ++r) wr[r] = w + (n0 + r) * k;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  // Separate even and odd accumulators (2 * M * RB independent FMA chains hide the FMA latency),
  // for every M: one summation order whatever the batch.
  __m256 acc[M][RB], acc_o[M][RB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) acc[m][r] = acc_o[m][r] = _mm256_setzero_ps();
  const int64_t k16 = k & ~int64_t{15};
  for (int64_t p = 0; p < k16; p += 16) {
    __m256 we[RB], wo[RB];
    for (int r = 0; r < RB; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + p));
      we[r] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      wo[r] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
    }
    for (int m = 0; m < M; ++m) {
      const __m256 xe = _mm256_loadu_ps(xs + m * k + p), xo = _mm256_loadu_ps(xs + m * k + p + 8);
      for (int r = 0; r < RB; ++r) {
        acc[m][r] = _mm256_fmadd_ps(xe, we[r], acc[m][r]);
        acc_o[m][r] = _mm256_fmadd_ps(xo, wo[r], acc_o[m][r]);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) {
      float s = hsum(_mm256_add_ps(acc[m][r], acc_o[m][r]));
      for (int64_t p = k16; p < k; ++p) s += x[m * k + p] * load1<DType::BF16>(wr[r], p);
      y[m * n + n0 + r] = s + (bias ? bias[n0 + r] : 0.0f);
    }
}

// x rows with every 16-block split into its even and odd elements (the weights' lane order).
const float* split_even_odd(const float* x, int64_t m_count, int64_t k) {
  float* xs = scratch<float>(static_cast<size_t>(m_count * k), 0);
  const int64_t k16 = k & ~int64_t{15};
  const __m256i even_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t m = 0; m < m_count; ++m)
    for (int64_t p = 0; p < k16; p += 16) {
      const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p), even_first);      // e0..e3 o0..o3
      const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p + 8), even_first);  // e4..e7 o4..o7
      _mm256_storeu_ps(xs + m * k + p, _mm256_permute2f128_ps(a, b, 0x20));
      _mm256_storeu_ps(xs + m * k + p + 8, _mm256_permute2f128_ps(a, b, 0x31));
    }
  return xs;
}

template <int M>
void gemv_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t n, int64_t k) {
  const float* xs = split_even_odd(x, M, k);
  constexpr int RB = M <= 2 ? 4 : 1;  // M > 2: 2 * M accumulators already fill the registers
  const int64_t blocks = (n + RB - 1) / RB;
  parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * RB;
      if (r0 + RB <= n) {
        gemv_bf16_rows<M, RB>(x, xs, w, bias, y, r0, n, k);
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

// Batch-invariant GEMM for M > 4: every output computed exactly as the GEMV computes it (same
// per-lane FMA chains, horizontal sum, tail and bias). Threads split N into blocks of weight rows
// small enough to stay in L2 while every 4-row slice of x sweeps them.
template <DType T, int M>
void rows_block(const float* x, const float* xs, const void* w, const float* bias, float* y, int64_t r0, int64_t r1,
                int64_t n, int64_t k) {
  if constexpr (T == DType::BF16) {
    const uint16_t* wb = static_cast<const uint16_t*>(w);
    for (int64_t r = r0; r < r1; ++r) gemv_bf16_rows<M, 1>(x, xs, wb, bias, y, r, n, k);
  } else {
    constexpr int RB = 3;
    int64_t r = r0;
    for (; r + RB <= r1; r += RB) gemv_rows<T, M, RB>(x, w, bias, y, r, n, k);
    for (; r < r1; ++r) gemv_rows<T, M, 1>(x, w, bias, y, r, n, k);
  }
}

template <DType T>
void gemm_rows(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const float* xs = T == DType::BF16 ? split_even_odd(x, m, k) : nullptr;
  const int64_t row_bytes = std::max<int64_t>(1, k * dtype_size(T));
  const int64_t nb = std::max<int64_t>(6, (int64_t{192} * 1024 / row_bytes) / 6 * 6);
  const int64_t blocks = (n + nb - 1) / nb;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * nb, r1 = std::min(n, r0 + nb);
      for (int64_t m0 = 0; m0 < m; m0 += 4) {
        const float* xm = x + m0 * k;
        const float* xsm = xs ? xs + m0 * k : nullptr;
        float* ym = y + m0 * n;
        switch (std::min<int64_t>(4, m - m0)) {
          case 1: rows_block<T, 1>(xm, xsm, w, bias, ym, r0, r1, n, k); break;
          case 2: rows_block<T, 2>(xm, xsm, w, bias, ym, r0, r1, n, k); break;
          case 3: rows_block<T, 3>(xm, xsm, w, bias, ym, r0, r1, n, k); break;
          default: rows_block<T, 4>(xm, xsm, w, bias, ym, r0, r1, n, k); break;
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
