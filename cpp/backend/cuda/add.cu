// out = a + b, elementwise over same-shape contiguous tensors (any float dtypes); out may alias.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename TA, typename TB, typename TO>
static __global__ void add_kernel(const TA* a, const TB* b, TO* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_f32<TO>(to_f32(a[i]) + to_f32(b[i]));
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  for (auto [t, n] : {std::pair{&a, "a"}, {&b, "b"}, {&out, "out"}}) {
    check_device(*t, "add", n); check_float(*t, "add", n); check_contiguous(*t, "add", n);
  }
  if (a.numel() != out.numel() || b.numel() != out.numel())
    fail(ErrorCode::kInvalidArgument, "cuda add: shapes differ: " + a.describe() + " + " + b.describe() + " -> " + out.describe());
  int64_t n = out.numel();
  if (n == 0) return;
  MLXB_FLOAT_SWITCH(a.dtype(), TA, MLXB_FLOAT_SWITCH(b.dtype(), TB, MLXB_FLOAT_SWITCH(out.dtype(), TO,
      add_kernel<TA, TB, TO><<<grid_for(n), 256, 0, stream()>>>(a.ptr<TA>(), b.ptr<TB>(), out.ptr<TO>(), n))));
  MLXB_CUDA_LAUNCHED("add");
}

}  // namespace mlxb::cuda
