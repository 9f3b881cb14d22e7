// y = x / sqrt(mean(x^2) + eps) * (add_one ? 1 + w : w) per row of the last dim, in float32,
// rounded once to y's dtype. One block per row; x may alias y (each thread rewrites only the
// elements it read).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

template <typename TX, typename TW, typename TY>
static __global__ void rms_norm_kernel(const TX* x, const TW* w, TY* y, int64_t h, float eps, bool add_one) {
  const TX* xr = x + blockIdx.x * h;
  TY* yr = y + blockIdx.x * h;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) { float v = to_f32(xr[i]); ss += v * v; }
  float inv = rsqrtf(block_sum(ss) / static_cast<float>(h) + eps);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
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
      rms_norm_kernel<TX, TW, TY><<<static_cast<unsigned>(rows), threads, 0, stream()>>>(x.ptr<TX>(), w.ptr<TW>(), y.ptr<TY>(), h, eps,
                                                                                     add_one))));
  MLXB_CUDA_LAUNCHED("rms_norm");
}

}  // namespace mlxb::cuda

namespace mlxb::cuda {

// x += branch (rounded to x's dtype), then y = rms_norm(x): the same arithmetic and reduction
// order as add followed by rms_norm, in one pass over the row.
template <typename TX, typename TB, typename TW, typename TY>
static __global__ void add_rms_norm_kernel(TX* x, const TB* b, const TW* w, TY* y, int64_t h, float eps, bool add_one) {
  TX* xr = x + blockIdx.x * h;
  const TB* br = b + blockIdx.x * h;
  TY* yr = y + blockIdx.x * h;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    TX s = from_f32<TX>(to_f32(xr[i]) + to_f32(br[i]));
    xr[i] = s;
    float v = to_f32(s);
    ss += v * v;
  }
  float inv = rsqrtf(block_sum(ss) / static_cast<float>(h) + eps);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float wv = to_f32(w[i]);
    yr[i] = from_f32<TY>(to_f32(xr[i]) * inv * (add_one ? 1.0f + wv : wv));
  }
}

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
          add_rms_norm_kernel<TX, TB, TW, TY><<<static_cast<unsigned>(rows), threads, 0, stream()>>>(
              x.ptr<TX>(), branch.ptr<TB>(), w.ptr<TW>(), y.ptr<TY>(), h, eps, add_one)))));
  MLXB_CUDA_LAUNCHED("add_rms_norm");
}

}  // namespace mlxb::cuda
