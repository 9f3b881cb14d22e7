// y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]), float32 accumulation.
// - M <= 8 (decode): a bandwidth-bound GEMV, one warp per weight row, 16-byte loads of the
//   weight, every x row applied to each loaded weight vector (gemv_kernel).
// - larger M with x, w, y of one dtype: cuBLASLt (dlopened; pure float32 compute for f32).
// y always has x's dtype (the activation dtype); w may differ.
// - anything else (mixed dtypes, no cuBLASLt): a tiled SIMT kernel in float32 (gemm_kernel).
#include <algorithm>

#include "backend/cuda/backend.h"
#include "backend/cuda/activation.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cublaslt.h"
#include "backend/cuda/matmul_rows.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rms_row.cuh"

namespace mlxb::cuda {

constexpr int kGemvWarps = 4;
// 16-byte weight loads in flight per lane: more for one or two rows (decode), where the kernel is
// bound by memory latency per warp; the order of accumulation does not depend on it.
template <int M> constexpr int gemv_unroll() { return M <= 2 ? 8 : 4; }

// One warp per output column n. kVec: K % 8 == 0 and 16-byte aligned rows (vector loads).
template <int M, bool kVec, typename TX, typename TW, typename TY>
static __global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const TX* __restrict__ x, const TW* __restrict__ w,
                                                                      const TW* __restrict__ bias, TY* __restrict__ y,
                                                                      int64_t n_count, int64_t k_count) {
  constexpr int kGemvUnroll = gemv_unroll<M>();
  int lane = threadIdx.x & 31;
  int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (n >= n_count) return;
  const TW* wr = w + n * k_count;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  if constexpr (kVec) {
    int64_t vecs = k_count / 8;
    int64_t v = lane;
    for (; v + 32 * (kGemvUnroll - 1) < vecs; v += 32 * kGemvUnroll) {
      float wv[kGemvUnroll][8];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) load8(wr + (v + 32 * u) * 8, wv[u]);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[8];
          load8(x + m * k_count + (v + 32 * u) * 8, xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m] = fmaf(wv[u][j], xv[j], acc[m]);
        }
      }
    }
    for (; v < vecs; v += 32) {
      float wv[8];
      load8(wr + v * 8, wv);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[8];
        load8(x + m * k_count + v * 8, xv);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m] = fmaf(wv[j], xv[j], acc[m]);
      }
    }
  } else {
    for (int64_t k = lane; k < k_count; k += 32) {
      float wv = to_f32(wr[k]);
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] = fmaf(wv, to_f32(x[m * k_count + k]), acc[m]);
    }
  }
  float b = bias ? to_f32(bias[n]) : 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float s = warp_sum(acc[m]);
    if (lane == 0) y[m * n_count + n] = from_f32<TY>(s + b);
  }
}

template <int M, typename TX, typename TW, typename TY>
static void launch_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t n, int64_t k) {
  unsigned grid = static_cast<unsigned>(ceil_div(n, kGemvWarps));
  bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data()) % 16 == 0;
  const TW* b = bias ? bias->ptr<TW>() : nullptr;
  if (vec)
    gemv_kernel<M, true, TX, TW, TY><<<grid, kGemvWarps * 32, 0, stream()>>>(x.ptr<TX>(), w.ptr<TW>(), b, y.ptr<TY>(), n, k);
  else
    gemv_kernel<M, false, TX, TW, TY><<<grid, kGemvWarps * 32, 0, stream()>>>(x.ptr<TX>(), w.ptr<TW>(), b, y.ptr<TY>(), n, k);
}

template <typename TX, typename TW, typename TY>
static void gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, int64_t m, int64_t n, int64_t k) {
  switch (m) {
    case 1: launch_gemv<1, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 2: launch_gemv<2, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 3: launch_gemv<3, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 4: launch_gemv<4, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 5: launch_gemv<5, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 6: launch_gemv<6, TX, TW, TY>(x, w, bias, y, n, k); break;
    case 7: launch_gemv<7, TX, TW, TY>(x, w, bias, y, n, k); break;
    default: launch_gemv<8, TX, TW, TY>(x, w, bias, y, n, k); break;
  }
}

// Fused gate/up GEMV for one row: w is [gate; up] ([2F, K]); warp n computes rows n and F + n
// (both weight streams in flight), rounds each to TY as matmul would, and writes act(g) * u as
// gated_act would: the same results as matmul followed by gated_act, in one launch.
template <Activation A, typename TX, typename TW, typename TY>
static __global__ void __launch_bounds__(kGemvWarps * 32) gemv_gated_kernel(const TX* __restrict__ x, const TW* __restrict__ w,
                                                                            const TW* __restrict__ bias, TY* __restrict__ y,
                                                                            int64_t f_count, int64_t k_count) {
  constexpr int U = 8;
  int lane = threadIdx.x & 31;
  int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (n >= f_count) return;
  const TW* wg = w + n * k_count;
  const TW* wu = w + (f_count + n) * k_count;
  float ag = 0.0f, au = 0.0f;
  int64_t vecs = k_count / 8;
  int64_t v = lane;
  for (; v + 32 * (U - 1) < vecs; v += 32 * U) {
    float gv[U][8], uv[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u) { load8(wg + (v + 32 * u) * 8, gv[u]); load8(wu + (v + 32 * u) * 8, uv[u]); }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xv[8];
      load8(x + (v + 32 * u) * 8, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) ag = fmaf(gv[u][j], xv[j], ag);
#pragma unroll
      for (int j = 0; j < 8; ++j) au = fmaf(uv[u][j], xv[j], au);
    }
  }
  for (; v < vecs; v += 32) {
    float gv[8], uv[8], xv[8];
    load8(wg + v * 8, gv);
    load8(wu + v * 8, uv);
    load8(x + v * 8, xv);
#pragma unroll
    for (int j = 0; j < 8; ++j) ag = fmaf(gv[j], xv[j], ag);
#pragma unroll
    for (int j = 0; j < 8; ++j) au = fmaf(uv[j], xv[j], au);
  }
  float g = warp_sum(ag), u = warp_sum(au);
  if (lane == 0) {
    float bg = bias ? to_f32(bias[n]) : 0.0f, bu = bias ? to_f32(bias[f_count + n]) : 0.0f;
    float gr = to_f32(from_f32<TY>(g + bg)), ur = to_f32(from_f32<TY>(u + bu));
    y[n] = from_f32<TY>(activate<A>(gr) * ur);
  }
}

// Tiled SIMT GEMM: 64x64 output tile per block of 256 threads, 4x4 outputs per thread, K in
// steps of 16 staged through shared memory as float32. Bounds-checked for any M, N, K.
constexpr int kTile = 64, kTileK = 16;

template <typename TX, typename TW, typename TY>
static __global__ void __launch_bounds__(256) gemm_kernel(const TX* __restrict__ x, const TW* __restrict__ w,
                                                          const TW* __restrict__ bias, TY* __restrict__ y, int64_t m_count,
                                                          int64_t n_count, int64_t k_count) {
  __shared__ float xs[kTileK][kTile + 4];
  __shared__ float ws[kTileK][kTile + 4];
  int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k_count; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += 256) {
      int r = i / kTileK, c = i % kTileK;
      int64_t gm = m0 + r, gn = n0 + r, gk = k0 + c;
      xs[c][r] = (gm < m_count && gk < k_count) ? to_f32(x[gm * k_count + gk]) : 0.0f;
      ws[c][r] = (gn < n_count && gk < k_count) ? to_f32(w[gn * k_count + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTileK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) { a[i] = xs[c][ty + 16 * i]; b[i] = ws[c][tx + 16 * i]; }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t gm = m0 + ty + 16 * i;
    if (gm >= m_count) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t gn = n0 + tx + 16 * j;
      if (gn < n_count) y[gm * n_count + gn] = from_f32<TY>(acc[i][j] + (bias ? to_f32(bias[gn]) : 0.0f));
    }
  }
}

template <typename TB, typename TY>
static __global__ void bias_kernel(TY* y, const TB* bias, int64_t rows, int64_t n) {
  int64_t total = rows * n;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = from_f32<TY>(to_f32(y[i]) + to_f32(bias[i % n]));
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  for (auto [t, nm] : {std::pair{&x, "x"}, {&w, "w"}, {&y, "y"}}) {
    check_device(*t, "matmul", nm); check_float(*t, "matmul", nm); check_contiguous(*t, "matmul", nm);
  }
  if (w.ndim() != 2) fail(ErrorCode::kInvalidArgument, "cuda matmul: w must be [N, K]: " + w.describe());
  int64_t n = w.dim(0), k = w.dim(1);
  if (x.ndim() < 1 || x.dim(-1) != k) fail(ErrorCode::kInvalidArgument, "cuda matmul: x " + x.describe() + " does not match w " + w.describe());
  int64_t m = x.numel() / (k == 0 ? 1 : k);
  if (k == 0) m = y.numel() / (n == 0 ? 1 : n);
  if (y.numel() != m * n || y.dim(-1) != n) fail(ErrorCode::kInvalidArgument, "cuda matmul: y must be [M, N]: " + y.describe());
  if (y.dtype() != x.dtype())
    fail(ErrorCode::kUnsupported, "cuda matmul: y must have x's dtype (" + x.describe() + " -> " + y.describe() + ")");
  if (bias) {
    check_device(*bias, "matmul", "bias"); check_contiguous(*bias, "matmul", "bias");
    if (bias->dtype() != w.dtype() || bias->numel() != n)
      fail(ErrorCode::kInvalidArgument, "cuda matmul: bias must be [N] in w's dtype: " + bias->describe());
  }
  if (m == 0 || n == 0) return;
  if (m <= kGemvMaxRows) {
    MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(w.dtype(), TW, gemv<TX, TW, TX>(x, w, bias, y, m, n, k)));
    MLXB_CUDA_LAUNCHED("matmul (gemv)");
    return;
  }
  if (rows_gemm(x, w, bias, nullptr, y)) return;
  bool same = x.dtype() == w.dtype() && w.dtype() == y.dtype() && k > 0;
  if (same && cublaslt_matmul(x.data(), w.data(), y.data(), m, n, k, w.dtype(), stream())) {
    if (bias) {
      MLXB_FLOAT_SWITCH(w.dtype(), TB, MLXB_FLOAT_SWITCH(y.dtype(), TY,
          bias_kernel<TB, TY><<<grid_for(m * n), 256, 0, stream()>>>(y.ptr<TY>(), bias->ptr<TB>(), m, n)));
      MLXB_CUDA_LAUNCHED("matmul (bias)");
    }
    return;
  }
  if (ceil_div(m, kTile) > 65535) fail(ErrorCode::kUnsupported, "cuda matmul: too many rows for the fallback kernel");
  dim3 grid(static_cast<unsigned>(ceil_div(n, kTile)), static_cast<unsigned>(ceil_div(m, kTile)));
  MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(w.dtype(), TW,
      gemm_kernel<TX, TW, TX><<<grid, 256, 0, stream()>>>(x.ptr<TX>(), w.ptr<TW>(), bias ? bias->ptr<TW>() : nullptr, y.ptr<TX>(), m,
                                                          n, k)));
  MLXB_CUDA_LAUNCHED("matmul (gemm)");
}

}  // namespace mlxb::cuda

namespace mlxb::cuda {

// Rows beyond the GEMV's reach go through cuBLASLt with beta = 1 (one rounding of the float32 sum);
// anything else (or no cuBLASLt) takes the generic op.
void CudaBackend::matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid) {
  const bool fits = x.device() == Device::kCUDA && w.device() == Device::kCUDA && resid.device() == Device::kCUDA &&
                    x.is_contiguous() && w.is_contiguous() && resid.is_contiguous() && w.ndim() == 2 && x.ndim() >= 1 &&
                    x.dim(-1) == w.dim(1) && w.dim(1) > 0 && resid.ndim() >= 1 && resid.dim(-1) == w.dim(0) &&
                    x.dtype() == w.dtype() && resid.dtype() == w.dtype() && (w.dtype() == DType::BF16 || w.dtype() == DType::F16) &&
                    x.numel() / w.dim(1) == resid.numel() / std::max<int64_t>(1, w.dim(0)) && x.data() != resid.data();
  const int64_t m = fits ? x.numel() / w.dim(1) : 0;
  if (fits && m > kGemvMaxRows && cublaslt_matmul(x.data(), w.data(), resid.data(), m, w.dim(0), w.dim(1), w.dtype(), stream(), true)) {
    MLXB_CUDA_LAUNCHED("matmul_accumulate");
    return;
  }
  Backend::matmul_accumulate(x, w, resid);
}

// out[r, j] = act(h[r, j]) * h[r, F + j] for h [M, 2F] (one fused [gate; up] projection of M rows).
template <Activation A, typename T>
static __global__ void gated_halves_kernel(const T* __restrict__ h, T* __restrict__ out, int64_t m, int64_t f) {
  const int64_t n = m * f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    out[i] = from_f32<T>(activate<A>(to_f32(h[r * 2 * f + j])) * to_f32(h[r * 2 * f + f + j]));
  }
}

// The same for 16-bit h and out with F % 8 == 0: a row per blockIdx.y, eight columns per thread
// (16-byte loads and stores; no 64-bit division per element). kScaled (rms_scaled_gated_act): the
// gate and up values are first multiplied by row r's 1 / rms of x [M, hd] (rms_norm's float32
// sum, rms_row.cuh); otherwise x is not read.
template <Activation A, typename T, bool kScaled>
static __global__ void gated_halves_vec_kernel(const T* __restrict__ h, T* __restrict__ out, int64_t f, const T* __restrict__ x,
                                               int64_t hd, float eps) {
  grid_dependents_may_launch();  // launched programmatically (common.cuh: programmatic_ops)
  grid_dependency_wait();
  const int64_t r = blockIdx.y, j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  float s = 1.0f;
  if constexpr (kScaled) {
    const T* xr = x + r * hd;
    s = rms_inv_row([&](int64_t i) { return to_f32(xr[i]); }, hd, eps);
  }
  if (j >= f) return;
  const uint4 gv = *reinterpret_cast<const uint4*>(h + r * 2 * f + j);
  const uint4 uv = *reinterpret_cast<const uint4*>(h + r * 2 * f + f + j);
  const T* g = reinterpret_cast<const T*>(&gv);
  const T* u = reinterpret_cast<const T*>(&uv);
  uint4 ov;
  T* o = reinterpret_cast<T*>(&ov);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (kScaled) o[i] = from_f32<T>(activate<A>(s * to_f32(g[i])) * (s * to_f32(u[i])));
    else o[i] = from_f32<T>(activate<A>(to_f32(g[i])) * to_f32(u[i]));
  }
  *reinterpret_cast<uint4*>(out + r * f + j) = ov;
}

template <Activation A, typename T>
static void launch_gated_halves(const T* h, T* out, int64_t m, int64_t f) {
  if constexpr (sizeof(T) == 2) {
    if (f % 8 == 0 && m <= 65535 && reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      dim3 grid(static_cast<unsigned>(ceil_div(f / 8, 256)), static_cast<unsigned>(m));
      launch_kernel(gated_halves_vec_kernel<A, T, false>, grid, dim3(256), 0, programmatic_ops("act"), h, out, f, nullptr, int64_t{0},
                    0.0f);
      return;
    }
  }
  gated_halves_kernel<A, T><<<grid_for(m * f), 256, 0, stream()>>>(h, out, m, f);
}

template <typename T>
static void launch_scaled_gated(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out) {
  const int64_t m = out.dim(0), f = out.dim(1);
  const dim3 grid(static_cast<unsigned>(ceil_div(f / 8, 256)), static_cast<unsigned>(m));
  const bool pdl = programmatic_ops("act");
  auto go = [&](auto kernel) { launch_kernel(kernel, grid, dim3(256), 0, pdl, h.ptr<T>(), out.ptr<T>(), f, x.ptr<T>(), x.dim(1), eps); };
  switch (act) {
    case Activation::kSiLU: go(gated_halves_vec_kernel<Activation::kSiLU, T, true>); break;
    case Activation::kGeluExact: go(gated_halves_vec_kernel<Activation::kGeluExact, T, true>); break;
    case Activation::kGeluTanh: go(gated_halves_vec_kernel<Activation::kGeluTanh, T, true>); break;
  }
}

void CudaBackend::rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out) {
  const bool fits = h.device() == Device::kCUDA && x.device() == Device::kCUDA && out.device() == Device::kCUDA && h.ndim() == 2 &&
                    x.ndim() == 2 && out.ndim() == 2 && h.is_contiguous() && x.is_contiguous() && out.is_contiguous() &&
                    h.dim(0) == out.dim(0) && x.dim(0) == out.dim(0) && h.dim(1) == 2 * out.dim(1) && out.dim(1) % 8 == 0 &&
                    out.dim(0) <= 65535 && x.dim(1) > 0 && h.dtype() == out.dtype() && x.dtype() == out.dtype() &&
                    (out.dtype() == DType::BF16 || out.dtype() == DType::F16) && reinterpret_cast<uintptr_t>(h.data()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(out.data()) % 16 == 0;
  if (!fits) {
    Backend::rms_scaled_gated_act(h, x, eps, act, out);
    return;
  }
  if (out.dim(0) == 0) return;
  if (out.dtype() == DType::BF16) launch_scaled_gated<__nv_bfloat16>(h, x, eps, act, out);
  else launch_scaled_gated<__half>(h, x, eps, act, out);
  MLXB_CUDA_LAUNCHED("rms_scaled_gated_act");
}

// Several rows through a fused dense [gate; up] weight: one matmul into [M, 2F] (rounded to out's
// dtype, as matmul then gated_act), then the activation over its two halves. False when the
// tensors do not fit this path (the generic op then runs).
static bool gated_rows(CudaBackend& be, const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) {
  if (w.ndim() != 2 || w.dim(0) % 2 != 0 || out.ndim() < 1 || out.dim(-1) * 2 != w.dim(0) || x.ndim() < 1 || x.dim(-1) != w.dim(1))
    return false;
  const int64_t f = w.dim(0) / 2, k = w.dim(1);
  if (f == 0 || k == 0 || out.numel() % f != 0 || x.numel() != out.numel() / f * k) return false;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &out})
    if (t->device() != Device::kCUDA || !t->is_contiguous() || t->dtype() != out.dtype()) return false;
  if (out.dtype() != DType::BF16 && out.dtype() != DType::F16 && out.dtype() != DType::F32) return false;
  const int64_t m = out.numel() / f;
  if (rows_gemm(x.reshape({m, k}), w, bias, &act, out)) return true;
  Tensor h = Tensor::empty({m, 2 * f}, out.dtype(), Device::kCUDA);
  be.matmul(x.reshape({m, k}), w, bias, h);
  MLXB_FLOAT_SWITCH(out.dtype(), T, {
    switch (act) {
      case Activation::kSiLU: launch_gated_halves<Activation::kSiLU, T>(h.ptr<T>(), out.ptr<T>(), m, f); break;
      case Activation::kGeluExact: launch_gated_halves<Activation::kGeluExact, T>(h.ptr<T>(), out.ptr<T>(), m, f); break;
      case Activation::kGeluTanh: launch_gated_halves<Activation::kGeluTanh, T>(h.ptr<T>(), out.ptr<T>(), m, f); break;
    }
  });
  MLXB_CUDA_LAUNCHED("gated_matmul (rows)");
  return true;
}

void CudaBackend::gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) {
  const bool one_row = x.ndim() >= 1 && w.ndim() == 2 && x.numel() == w.dim(1) && w.dim(0) % 2 == 0 && out.numel() * 2 == w.dim(0);
  const bool fits = one_row && x.device() == Device::kCUDA && w.device() == Device::kCUDA && out.device() == Device::kCUDA &&
                    x.is_contiguous() && w.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype() &&
                    (x.dtype() == DType::BF16 || x.dtype() == DType::F16) && w.dtype() == x.dtype() && w.dim(1) % 8 == 0 &&
                    reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data()) % 16 == 0 &&
                    (!bias || (bias->device() == Device::kCUDA && bias->dtype() == w.dtype() && bias->numel() == w.dim(0) &&
                               bias->is_contiguous()));
  if (!fits) {
    if (!gated_rows(*this, x, w, bias, act, out)) Backend::gated_matmul(x, w, bias, act, out);
    return;
  }
  const int64_t f = w.dim(0) / 2, k = w.dim(1);
  unsigned grid = static_cast<unsigned>(ceil_div(f, kGemvWarps));
  MLXB_FLOAT_SWITCH(x.dtype(), T, {
    const T* b = bias ? bias->ptr<T>() : nullptr;
    switch (act) {
      case Activation::kSiLU:
        gemv_gated_kernel<Activation::kSiLU, T, T, T><<<grid, kGemvWarps * 32, 0, stream()>>>(x.ptr<T>(), w.ptr<T>(), b, out.ptr<T>(), f, k);
        break;
      case Activation::kGeluExact:
        gemv_gated_kernel<Activation::kGeluExact, T, T, T><<<grid, kGemvWarps * 32, 0, stream()>>>(x.ptr<T>(), w.ptr<T>(), b, out.ptr<T>(), f, k);
        break;
      case Activation::kGeluTanh:
        gemv_gated_kernel<Activation::kGeluTanh, T, T, T><<<grid, kGemvWarps * 32, 0, stream()>>>(x.ptr<T>(), w.ptr<T>(), b, out.ptr<T>(), f, k);
        break;
    }
  });
  MLXB_CUDA_LAUNCHED("gated_matmul (gemv)");
}

}  // namespace mlxb::cuda
