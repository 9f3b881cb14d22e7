// y = x / sqrt(mean(x^2) + eps) * (add_one ? 1 + w : w) per row of the last dim, in float32,
// rounded once to y's dtype, and the fused residual form (x += branch, then the norm of x).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

constexpr int kMaxPer = 8;  // elements per thread kept in registers (rows up to 8 x blockDim)
constexpr int kNormMaxThreads = 512;

// One block per row. Thread j owns elements j, j + blockDim, ...: when they fit in registers they
// are all loaded at once (one memory round trip instead of one per element), otherwise the row is
// looped over; either way the sum of squares is accumulated in the same order, with explicit fmas
// (gemv_fused.cu repeats this sum and must get the same bits). kAdd: x += b first
// (rounded to x's dtype, as the add op). x may alias y (each thread rewrites only its elements).
template <bool kAdd, typename TX, typename TB, typename TW, typename TY>
static __global__ void __launch_bounds__(kNormMaxThreads) norm_kernel(TX* x, const TB* b, const TW* w, TY* y, int64_t h, float eps, bool add_one) {
  grid_dependents_may_launch();  // launched programmatically (common.cuh: programmatic_ops)
  grid_dependency_wait();
  TX* xr = x + blockIdx.x * h;
  const TB* br = kAdd ? b + blockIdx.x * h : nullptr;
  TY* yr = y + blockIdx.x * h;
  const int64_t bd = blockDim.x, tid = threadIdx.x;
  float ss = 0.0f;
  if (h <= bd * kMaxPer) {
    float v[kMaxPer];
#pragma unroll
    for (int k = 0; k < kMaxPer; ++k) {
      const int64_t i = tid + k * bd;
      v[k] = i < h ? to_f32(xr[i]) : 0.0f;
    }
    if constexpr (kAdd) {
      float bv[kMaxPer];
#pragma unroll
      for (int k = 0; k < kMaxPer; ++k) {
        const int64_t i = tid + k * bd;
        bv[k] = i < h ? to_f32(br[i]) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kMaxPer; ++k) {
        const int64_t i = tid + k * bd;
        if (i < h) {
          TX s = from_f32<TX>(v[k] + bv[k]);
          xr[i] = s;
          v[k] = to_f32(s);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kMaxPer; ++k)
      if (tid + k * bd < h) ss = __fmaf_rn(v[k], v[k], ss);
    float inv = rsqrtf(block_sum(ss) / static_cast<float>(h) + eps);
    float wv[kMaxPer];
#pragma unroll
    for (int k = 0; k < kMaxPer; ++k) {
      const int64_t i = tid + k * bd;
      wv[k] = i < h ? to_f32(w[i]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kMaxPer; ++k) {
      const int64_t i = tid + k * bd;
      if (i < h) yr[i] = from_f32<TY>(v[k] * inv * (add_one ? 1.0f + wv[k] : wv[k]));
    }
    return;
  }
  for (int64_t i = tid; i < h; i += bd) {
    float v;
    if constexpr (kAdd) {
      TX s = from_f32<TX>(to_f32(xr[i]) + to_f32(br[i]));
      xr[i] = s;
      v = to_f32(s);
    } else {
      v = to_f32(xr[i]);
    }
    ss = __fmaf_rn(v, v, ss);
  }
  float inv = rsqrtf(block_sum(ss) / static_cast<float>(h) + eps);
  for (int64_t i = tid; i < h; i += bd) {
    float wv = to_f32(w[i]);
    yr[i] = from_f32<TY>(to_f32(xr[i]) * inv * (add_one ? 1.0f + wv : wv));
  }
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y) {
  for (auto [t, n] : {std::pair{&x, "x"}, {&w, "w"}, {&y, "y"}}) {
    check_device(*t, "rms_norm", n); check_float(*t, "rms_norm", n); check_contiguous(*t, "rms_norm", n);
  }
  int64_t h = w.numel();
  if (h == 0 || x.dim(-1) != h || x.numel() != y.numel())
    fail(ErrorCode::kInvalidArgument, "cuda rms_norm: shapes do not match: " + x.describe() + ", w " + w.describe() + " -> " + y.describe());
  int64_t rows = x.numel() / h;
  if (rows == 0) return;
  int threads = h >= 2048 ? 512 : (h >= 512 ? 256 : 128);
  MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(w.dtype(), TW, MLXB_FLOAT_SWITCH(y.dtype(), TY,
      launch_kernel(norm_kernel<false, TX, TX, TW, TY>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, programmatic_ops("norm"),
                    x.ptr<TX>(), static_cast<const TX*>(nullptr), w.ptr<TW>(), y.ptr<TY>(), h, eps, add_one))));
  MLXB_CUDA_LAUNCHED("rms_norm");
}

}  // namespace mlxb::cuda

namespace mlxb::cuda {

void CudaBackend::add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y) {
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&x, "x"}, {&branch, "branch"}, {&w, "w"}, {&y, "y"}}) {
    check_device(*t, "add_rms_norm", n); check_float(*t, "add_rms_norm", n); check_contiguous(*t, "add_rms_norm", n);
  }
  int64_t h = w.numel();
  if (h == 0 || x.dim(-1) != h || x.numel() != y.numel() || branch.numel() != x.numel())
    fail(ErrorCode::kInvalidArgument, "cuda add_rms_norm: shapes do not match: " + x.describe() + " + " + branch.describe() + ", w " +
                                          w.describe() + " -> " + y.describe());
  if (x.data() == y.data() || branch.data() == y.data()) {  // the generic order handles aliasing
    Backend::add_rms_norm(x, branch, w, eps, add_one, y);
    return;
  }
  int64_t rows = x.numel() / h;
  if (rows == 0) return;
  int threads = h >= 2048 ? 512 : (h >= 512 ? 256 : 128);  // as rms_norm: same reduction order
  MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(branch.dtype(), TB, MLXB_FLOAT_SWITCH(w.dtype(), TW,
      MLXB_FLOAT_SWITCH(y.dtype(), TY,
          launch_kernel(norm_kernel<true, TX, TB, TW, TY>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, programmatic_ops("norm"),
                        x.ptr<TX>(), branch.ptr<TB>(), w.ptr<TW>(), y.ptr<TY>(), h, eps, add_one)))));
  MLXB_CUDA_LAUNCHED("add_rms_norm");
}

}  // namespace mlxb::cuda
