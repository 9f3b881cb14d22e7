// y = (x - mean) / sqrt(var + eps) * w + b per row of the last dim (biased variance, two-pass in
// float32). b optional. One block per row; x may alias y.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

template <typename TX, typename TW, typename TY>
static __global__ void layer_norm_kernel(const TX* x, const TW* w, const TW* b, TY* y, int64_t h, float eps) {
  const TX* xr = x + blockIdx.x * h;
  TY* yr = y + blockIdx.x * h;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) s += to_f32(xr[i]);
  float mean = block_sum(s) / static_cast<float>(h);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) { float d = to_f32(xr[i]) - mean; sq += d * d; }
  float inv = rsqrtf(block_sum(sq) / static_cast<float>(h) + eps);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float v = (to_f32(xr[i]) - mean) * inv * to_f32(w[i]);
    if (b) v += to_f32(b[i]);
    yr[i] = from_f32<TY>(v);
  }
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) {
  for (auto [t, n] : {std::pair{&x, "x"}, {&w, "w"}, {&y, "y"}}) {
    check_device(*t, "layer_norm", n); check_float(*t, "layer_norm", n); check_contiguous(*t, "layer_norm", n);
  }
  int64_t h = w.numel();
  if (h == 0 || x.dim(-1) != h || x.numel() != y.numel())
    fail(ErrorCode::kInvalidArgument, "cuda layer_norm: shapes do not match: " + x.describe() + ", w " + w.describe() + " -> " + y.describe());
  if (b) {
    check_device(*b, "layer_norm", "b"); check_contiguous(*b, "layer_norm", "b");
    if (b->dtype() != w.dtype() || b->numel() != h)
      fail(ErrorCode::kInvalidArgument, "cuda layer_norm: bias must match w: " + b->describe());
  }
  int64_t rows = x.numel() / h;
  if (rows == 0) return;
  int threads = h >= 2048 ? 512 : (h >= 512 ? 256 : 128);
  MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(w.dtype(), TW, MLXB_FLOAT_SWITCH(y.dtype(), TY,
      layer_norm_kernel<TX, TW, TY><<<static_cast<unsigned>(rows), threads, 0, stream()>>>(
          x.ptr<TX>(), w.ptr<TW>(), b ? b->ptr<TW>() : nullptr, y.ptr<TY>(), h, eps))));
  MLXB_CUDA_LAUNCHED("layer_norm");
}

}  // namespace mlxb::cuda
