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
    xr[ia] = from_f32<T>(rope_lo(a, b, c, s));
    xr[ib] = from_f32<T>(rope_hi(a, b, c, s));
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

namespace mlxb::cuda {

// rope_kv_write: one block per (token, head) over the q heads, then the k heads, then the v heads.
// q/k pairs are rotated exactly as rope_kernel does (the same float32 expressions), and k heads
// store their rotated values (and any unrotated tail) into the key cache as kv_write would; v
// heads are copied into the value cache. Slots outside [0, S) are skipped, as kv_write. q, k and v
// may be row-strided views (qs, ks, vs elements between tokens; heads contiguous), e.g. the
// column ranges of one fused q/k/v projection of several tokens.
template <typename T, typename TC>
static __global__ void rope_kv_kernel(T* q, int64_t qs, T* k, int64_t ks, const T* v, int64_t vs, const int32_t* pos, const float* inv_freq, const int32_t* slots,
                                      TC* kc, TC* vc, int64_t hq, int64_t hkv, int64_t dim, int64_t half, bool interleaved,
                                      float mscale, int64_t s_count, int64_t head_stride) {
  grid_dependents_may_launch();  // launched programmatically (common.cuh: programmatic_ops)
  grid_dependency_wait();
  const int64_t heads = hq + 2 * hkv;
  const int64_t t = blockIdx.x / heads, hh = blockIdx.x % heads;
  const int64_t slot = slots[t];
  const bool store = slot >= 0 && slot < s_count;
  if (hh < hq + hkv) {
    const bool is_k = hh >= hq;
    T* xr = is_k ? k + t * ks + (hh - hq) * dim : q + t * qs + hh * dim;
    TC* cr = is_k && store ? kc + (hh - hq) * head_stride + slot * dim : nullptr;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      float s, c;
      sincosf(static_cast<float>(pos[t]) * inv_freq[i], &s, &c);
      s *= mscale;
      c *= mscale;
      const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
      const float a = to_f32(xr[ia]), b = to_f32(xr[ib]);
      const T ra = from_f32<T>(rope_lo(a, b, c, s)), rb = from_f32<T>(rope_hi(a, b, c, s));
      xr[ia] = ra;
      xr[ib] = rb;
      if (cr) {
        cr[ia] = from_f32<TC>(to_f32(ra));
        cr[ib] = from_f32<TC>(to_f32(rb));
      }
    }
    if (cr)
      for (int64_t i = 2 * half + threadIdx.x; i < dim; i += blockDim.x) cr[i] = from_f32<TC>(to_f32(xr[i]));
  } else if (store) {
    const int64_t h = hh - hq - hkv;
    const T* vr = v + t * vs + h * dim;
    TC* cr = vc + h * head_stride + slot * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) cr[i] = from_f32<TC>(to_f32(vr[i]));
  }
}

void CudaBackend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                                const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  const bool shapes = q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3 && k_cache.ndim() == 3 && v_cache.ndim() == 3 &&
                      k.dim(0) == q.dim(0) && v.dim(0) == q.dim(0) && k.dim(1) == v.dim(1) && q.dim(2) == k.dim(2) &&
                      v.dim(2) == k.dim(2) && k_cache.dim(0) == k.dim(1) && k_cache.dim(2) == k.dim(2) &&
                      v_cache.dim(0) == k.dim(1) && v_cache.dim(1) == k_cache.dim(1) && v_cache.dim(2) == k.dim(2) &&
                      k_cache.stride(0) == v_cache.stride(0) && k_cache.stride(1) == k.dim(2) && k_cache.stride(2) == 1 &&
                      v_cache.stride(1) == k.dim(2) && v_cache.stride(2) == 1;
  const bool fits = shapes && q.device() == Device::kCUDA && k.device() == Device::kCUDA && v.device() == Device::kCUDA &&
                    positions.device() == Device::kCUDA && slots.device() == Device::kCUDA && k_cache.device() == Device::kCUDA &&
                    v_cache.device() == Device::kCUDA && args.inv_freq.defined() && args.inv_freq.device() == Device::kCUDA &&
                    rows_dense(q) && rows_dense(k) && rows_dense(v) && positions.is_contiguous() && slots.is_contiguous() &&
                    q.dtype() == k.dtype() && v.dtype() == k.dtype() && k_cache.dtype() == v_cache.dtype() &&
                    positions.dtype() == DType::I32 && slots.dtype() == DType::I32 && args.inv_freq.dtype() == DType::F32 &&
                    positions.numel() == q.dim(0) && slots.numel() == q.dim(0) && args.rot_dim > 0 && args.rot_dim % 2 == 0 &&
                    args.rot_dim <= q.dim(2) && args.inv_freq.numel() == args.rot_dim / 2 && q.dim(0) * (q.dim(1) + 2 * k.dim(1)) <= INT32_MAX;
  if (!fits) {
    Backend::rope_kv_write(q, k, v, positions, args, slots, k_cache, v_cache);
    return;
  }
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&k_cache, "k_cache"}, {&v_cache, "v_cache"}})
    check_float(*t, "rope_kv_write", n);
  const int64_t rows = q.dim(0) * (q.dim(1) + 2 * k.dim(1));
  if (rows == 0) return;
  const int64_t half = args.rot_dim / 2, dim = q.dim(2);
  const int threads = dim > 128 ? 128 : 64;
  MLXB_FLOAT_SWITCH(q.dtype(), T, MLXB_FLOAT_SWITCH(k_cache.dtype(), TC,
      launch_kernel(rope_kv_kernel<T, TC>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, programmatic_ops("rope"),
          q.ptr<T>(), q.stride(0), k.ptr<T>(), k.stride(0), v.ptr<T>(), v.stride(0), positions.ptr<int32_t>(), args.inv_freq.ptr<float>(),
          slots.ptr<int32_t>(), k_cache.ptr<TC>(), v_cache.ptr<TC>(), q.dim(1), k.dim(1), dim, half, args.interleaved, args.mscale,
          k_cache.dim(1), k_cache.stride(0))));
  MLXB_CUDA_LAUNCHED("rope_kv_write");
}

}  // namespace mlxb::cuda
