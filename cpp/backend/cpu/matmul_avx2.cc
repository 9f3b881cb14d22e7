// AVX2 + FMA matmul kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
// - gemv: M <= 4 rows of activations (decode). Threads split the N weight rows; each row of w
//   is streamed once, converted to float32 in registers and FMA'd against the x rows (kept in
//   L1), so the speed is the memory bandwidth of reading w.
//   bf16 weights take a cheaper route: 16 weights are one 32-byte load, and their float32 values
//   are that register shifted left by 16 bits (even elements) and masked to the high halves (odd
//   elements), with x reordered once per call to match ([8 even, 8 odd] per 16).
// - gemm: larger M (prefill). x is packed once into 6-row strips; threads split N into 16-column
//   panels whose weights are converted to float32 and packed k-major ([256][16]) a chunk at a
//   time, then a 6x16 register tile of y is accumulated per strip and panel (GotoBLAS-style).
// Both accumulate in float32 with FMA; only the summation order differs from the reference.
#include <algorithm>
#include <cstring>
#include <vector>

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
  // M <= 2: separate even and odd accumulators, so 2 * M * RB independent FMA chains hide the FMA latency.
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
        if constexpr (M <= 2) acc_o[m][r] = _mm256_fmadd_ps(xo, wo[r], acc_o[m][r]);
        else acc[m][r] = _mm256_fmadd_ps(xo, wo[r], acc[m][r]);  // M * RB = 8 chains already; no spare registers
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

template <int M>
void gemv_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t n, int64_t k) {
  // x rows with every 16-block split into its even and odd elements (the weights' lane order).
  float* xs = scratch<float>(static_cast<size_t>(M * k), 0);
  const int64_t k16 = k & ~int64_t{15};
  const __m256i even_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int m = 0; m < M; ++m)
    for (int64_t p = 0; p < k16; p += 16) {
      const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p), even_first);      // e0..e3 o0..o3
      const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + m * k + p + 8), even_first);  // e4..e7 o4..o7
      _mm256_storeu_ps(xs + m * k + p, _mm256_permute2f128_ps(a, b, 0x20));
      _mm256_storeu_ps(xs + m * k + p + 8, _mm256_permute2f128_ps(a, b, 0x31));
    }
  constexpr int RB = M <= 2 ? 4 : 2;
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

constexpr int kMR = 6, kNR = 16;
constexpr int64_t kKC = 256;

// In-register transpose of 8 rows of 8 floats: v[i][j] -> v[j][i].
inline void transpose8(__m256 v[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  v[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  v[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Packs w[n0 .. n0+16, k0 .. k0+kc] as float32 [kc][16]; rows past n are zero.
template <DType T>
void pack_panel(const void* w, int64_t n0, int64_t n, int64_t k, int64_t k0, int64_t kc, float* dst) {
  const int64_t es = dtype_size(T);
  const int64_t rows = std::min<int64_t>(kNR, n - n0);
  if (rows < kNR) std::memset(dst, 0, static_cast<size_t>(kc * kNR) * sizeof(float));
  const int64_t kc8 = kc & ~int64_t{7};
  if (rows == kNR) {
    // 8 rows x 8 k at a time, transposed in registers: dst rows are k, 16 floats each.
    for (int64_t r0 = 0; r0 < kNR; r0 += 8) {
      const char* src[8];
      for (int i = 0; i < 8; ++i) src[i] = static_cast<const char*>(w) + ((n0 + r0 + i) * k + k0) * es;
      for (int64_t p = 0; p < kc8; p += 8) {
        __m256 v[8];
        for (int i = 0; i < 8; ++i) v[i] = load8<T>(src[i], p);
        transpose8(v);
        for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (p + i) * kNR + r0, v[i]);
      }
      for (int64_t p = kc8; p < kc; ++p)
        for (int i = 0; i < 8; ++i) dst[p * kNR + r0 + i] = load1<T>(src[i], p);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const char* src = static_cast<const char*>(w) + ((n0 + r) * k + k0) * es;
    int64_t p = 0;
    for (; p < kc8; p += 8) {
      alignas(32) float t[8];
      _mm256_store_ps(t, load8<T>(src, p));
      for (int i = 0; i < 8; ++i) dst[(p + i) * kNR + r] = t[i];
    }
    for (; p < kc; ++p) dst[p * kNR + r] = load1<T>(src, p);
  }
}

// c[MR x 16] (ldc) (+)= x[MR x kc] (ldx) · panel[kc x 16]. `first`: overwrite c (adding bias).
// The accumulators are named variables (not an array) so they stay in registers.
template <int MR>
void micro(const float* xp, const float* panel, int64_t kc, float* c, int64_t ldc, int64_t ncols, bool first,
           const float* bias) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(panel + p * kNR), b1 = _mm256_load_ps(panel + p * kNR + 8);
    const float* a6 = xp + p * kMR;
    __m256 a;
    a = _mm256_broadcast_ss(a6); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
    if constexpr (MR > 1) { a = _mm256_broadcast_ss(a6 + 1); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11); }
    if constexpr (MR > 2) { a = _mm256_broadcast_ss(a6 + 2); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21); }
    if constexpr (MR > 3) { a = _mm256_broadcast_ss(a6 + 3); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31); }
    if constexpr (MR > 4) { a = _mm256_broadcast_ss(a6 + 4); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41); }
    if constexpr (MR > 5) { a = _mm256_broadcast_ss(a6 + 5); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51); }
  }
  alignas(32) float tile[kMR][kNR];
  _mm256_store_ps(tile[0], c00); _mm256_store_ps(tile[0] + 8, c01);
  _mm256_store_ps(tile[1], c10); _mm256_store_ps(tile[1] + 8, c11);
  _mm256_store_ps(tile[2], c20); _mm256_store_ps(tile[2] + 8, c21);
  _mm256_store_ps(tile[3], c30); _mm256_store_ps(tile[3] + 8, c31);
  _mm256_store_ps(tile[4], c40); _mm256_store_ps(tile[4] + 8, c41);
  _mm256_store_ps(tile[5], c50); _mm256_store_ps(tile[5] + 8, c51);
  alignas(32) float bias_t[kNR] = {};
  if (first && bias) std::memcpy(bias_t, bias, static_cast<size_t>(ncols) * sizeof(float));
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (ncols == kNR) {
      __m256 c0 = first ? _mm256_load_ps(bias_t) : _mm256_loadu_ps(ci);
      __m256 c1 = first ? _mm256_load_ps(bias_t + 8) : _mm256_loadu_ps(ci + 8);
      _mm256_storeu_ps(ci, _mm256_add_ps(c0, _mm256_load_ps(tile[i])));
      _mm256_storeu_ps(ci + 8, _mm256_add_ps(c1, _mm256_load_ps(tile[i] + 8)));
    } else {
      for (int64_t j = 0; j < ncols; ++j) ci[j] = (first ? bias_t[j] : ci[j]) + tile[i][j];
    }
  }
}

using MicroFn = void (*)(const float*, const float*, int64_t, float*, int64_t, int64_t, bool, const float*);
constexpr MicroFn kMicro[kMR + 1] = {nullptr, micro<1>, micro<2>, micro<3>, micro<4>, micro<5>, micro<6>};

// x [m, k] -> blocks [k / kc][m / 6][kc][6] (rows past m are zero), so the micro-kernel reads
// its 6 activation rows as one contiguous stream.
const float* pack_x(const float* x, int64_t m, int64_t k) {
  const int64_t mb = (m + kMR - 1) / kMR;
  float* xp = scratch<float>(static_cast<size_t>(mb * kMR * k), 0);
  parallel_for(mb, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min<int64_t>(kKC, k - k0);
        float* dst = xp + k0 * mb * kMR + b * kc * kMR;
        for (int i = 0; i < kMR; ++i) {
          const int64_t row = b * kMR + i;
          if (row < m) {
            const float* src = x + row * k + k0;
            for (int64_t p = 0; p < kc; ++p) dst[p * kMR + i] = src[p];
          } else {
            for (int64_t p = 0; p < kc; ++p) dst[p * kMR + i] = 0.0f;
          }
        }
      }
  });
  return xp;
}

// Per thread: chunks of up to kPanels panels (512 columns); per 256-deep k block the chunk's
// weights are packed once (512 KB, L2) and every 6-row block of x (6 KB, L1) sweeps them.
constexpr int64_t kPanels = 32;

template <DType T>
void gemm_t(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  const float* xp = pack_x(x, m, k);
  const int64_t mb = (m + kMR - 1) / kMR;
  const int64_t panels = (n + kNR - 1) / kNR;
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    float* packed = scratch<float>(static_cast<size_t>(kPanels * kKC * kNR), 1);
    for (int64_t c0 = p0; c0 < p1; c0 += kPanels) {
      const int64_t c1 = std::min(p1, c0 + kPanels);
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = std::min<int64_t>(kKC, k - k0);
        for (int64_t pi = c0; pi < c1; ++pi) pack_panel<T>(w, pi * kNR, n, k, k0, kc, packed + (pi - c0) * kKC * kNR);
        const float* xb = xp + k0 * mb * kMR;
        for (int64_t b = 0; b < mb; ++b) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, m - b * kMR));
          for (int64_t pi = c0; pi < c1; ++pi) {
            const int64_t n0 = pi * kNR, ncols = std::min<int64_t>(kNR, n - n0);
            kMicro[mr](xb + b * kc * kMR, packed + (pi - c0) * kKC * kNR, kc, y + b * kMR * n + n0, n, ncols, k0 == 0,
                       bias ? bias + n0 : nullptr);
          }
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
    case DType::F32: gemm_t<DType::F32>(x, w, bias, y, m, n, k); return;
    case DType::BF16: gemm_t<DType::BF16>(x, w, bias, y, m, n, k); return;
    default: gemm_t<DType::F16>(x, w, bias, y, m, n, k); return;
  }
}

}  // namespace mlxb::cpu::avx2
