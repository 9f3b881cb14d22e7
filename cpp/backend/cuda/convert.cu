// dst = src in dst's dtype (float32 / bfloat16 / float16, round to nearest even), same element
// count, both contiguous. Same dtype is a device copy.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename TS, typename TD>
static __global__ void convert_kernel(const TS* src, TD* dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = from_f32<TD>(to_f32(src[i]));
}

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  check_device(src, "convert", "src"); check_device(dst, "convert", "dst");
  check_contiguous(src, "convert", "src"); check_contiguous(dst, "convert", "dst");
  if (src.numel() != dst.numel())
    fail(ErrorCode::kInvalidArgument, "cuda convert: sizes differ: " + src.describe() + " -> " + dst.describe());
  int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    MLXB_CUDA_OK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(src.nbytes()), cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  check_float(src, "convert", "src"); check_float(dst, "convert", "dst");
  MLXB_FLOAT_SWITCH(src.dtype(), TS, MLXB_FLOAT_SWITCH(dst.dtype(), TD,
      convert_kernel<TS, TD><<<grid_for(n), 256, 0, stream()>>>(src.ptr<TS>(), dst.ptr<TD>(), n)));
  MLXB_CUDA_LAUNCHED("convert");
}

}  // namespace mlxb::cuda
