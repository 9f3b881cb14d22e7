// Row softmax over the last dim in float32 (max-subtracted). One block per row; x may alias y.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

template <typename TX, typename TY>
static __global__ void softmax_kernel(const TX* x, TY* y, int64_t n) {
  const TX* xr = x + blockIdx.x * n;
  TY* yr = y + blockIdx.x * n;
  float m = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, to_f32(xr[i]));
  m = block_max(m);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += expf(to_f32(xr[i]) - m);
  float inv = 1.0f / block_sum(s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<TY>(expf(to_f32(xr[i]) - m) * inv);
}

void CudaBackend::softmax(const Tensor& x, Tensor& y) {
  for (auto [t, n] : {std::pair{&x, "x"}, {&y, "y"}}) {
    check_device(*t, "softmax", n); check_float(*t, "softmax", n); check_contiguous(*t, "softmax", n);
  }
  if (x.ndim() < 1 || x.numel() != y.numel())
    fail(ErrorCode::kInvalidArgument, "cuda softmax: shapes differ: " + x.describe() + " -> " + y.describe());
  int64_t n = x.dim(-1);
  if (n == 0 || x.numel() == 0) return;
  int64_t rows = x.numel() / n;
  int threads = n >= 2048 ? 512 : (n >= 512 ? 256 : 128);
  MLXB_FLOAT_SWITCH(x.dtype(), TX, MLXB_FLOAT_SWITCH(y.dtype(), TY,
      softmax_kernel<TX, TY><<<static_cast<unsigned>(rows), threads, 0, stream()>>>(x.ptr<TX>(), y.ptr<TY>(), n)));
  MLXB_CUDA_LAUNCHED("softmax");
}

}  // namespace mlxb::cuda
