// x = cap * tanh(x / cap) in place (Gemma 2 logit and attention soft-capping).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename T>
static __global__ void softcap_kernel(T* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = from_f32<T>(cap * tanhf(to_f32(x[i]) / cap));
}

void CudaBackend::softcap(Tensor& x, float cap) {
  check_device(x, "softcap", "x"); check_float(x, "softcap", "x"); check_contiguous(x, "softcap", "x");
  if (!(cap > 0.0f)) fail(ErrorCode::kInvalidArgument, "cuda softcap: cap must be > 0");
  int64_t n = x.numel();
  if (n == 0) return;
  MLXB_FLOAT_SWITCH(x.dtype(), T, softcap_kernel<T><<<grid_for(n), 256, 0, stream()>>>(x.ptr<T>(), n, cap));
  MLXB_CUDA_LAUNCHED("softcap");
}

}  // namespace mlxb::cuda
