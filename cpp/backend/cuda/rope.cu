// Rotary embedding in place on x [T, H, D]: the first rot_dim of each head are rotated by the
// angle positions[t] * inv_freq[i] (float32 product, accurate sincos), pairs (i, i + rot_dim/2)
// or (2i, 2i+1) when interleaved; cos and sin are multiplied by mscale.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename T>
static __global__ void rope_kernel(T* x, const int32_t* pos, const float* inv_freq, int64_t t_count, int64_t heads,
                                   int64_t dim, int64_t half, bool interleaved, float mscale) {
  int64_t n = t_count * heads * half;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = k % half;
    int64_t row = k / half;  // t * heads + h
    int64_t t = row / heads;
    float s, c;
    sincosf(static_cast<float>(pos[t]) * inv_freq[i], &s, &c);
    s *= mscale;
    c *= mscale;
    T* xr = x + row * dim;
    int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    float a = to_f32(xr[ia]), b = to_f32(xr[ib]);
    xr[ia] = from_f32<T>(a * c - b * s);
    xr[ib] = from_f32<T>(b * c + a * s);
  }
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const RopeArgs& args) {
  check_device(x, "rope", "x"); check_float(x, "rope", "x"); check_contiguous(x, "rope", "x");
  check_device(positions, "rope", "positions"); check_device(args.inv_freq, "rope", "inv_freq");
  if (positions.dtype() != DType::I32 || args.inv_freq.dtype() != DType::F32)
    fail(ErrorCode::kInvalidArgument, "cuda rope: positions must be int32 and inv_freq float32");
  if (x.ndim() != 3 || positions.numel() != x.dim(0) || args.rot_dim <= 0 || args.rot_dim % 2 != 0 ||
      args.rot_dim > x.dim(2) || args.inv_freq.numel() != args.rot_dim / 2)
    fail(ErrorCode::kInvalidArgument, "cuda rope: x must be [T, H, D] with T positions and rot_dim/2 frequencies: " + x.describe());
  int64_t half = args.rot_dim / 2;
  int64_t n = x.dim(0) * x.dim(1) * half;
  if (n == 0) return;
  MLXB_FLOAT_SWITCH(x.dtype(), T, rope_kernel<T><<<grid_for(n), 256, 0, stream()>>>(
      x.ptr<T>(), positions.ptr<int32_t>(), args.inv_freq.ptr<float>(), x.dim(0), x.dim(1), x.dim(2), half, args.interleaved,
      args.mscale));
  MLXB_CUDA_LAUNCHED("rope");
}

}  // namespace mlxb::cuda
