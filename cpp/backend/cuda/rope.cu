// Rotary embedding in place on x [T, H, D]: the first rot_dim of each head are rotated by the
// angle positions[t] * inv_freq[i] (float32 product, accurate sincos), pairs (i, i + rot_dim/2)
// or (2i, 2i+1) when interleaved; cos and sin are multiplied by mscale.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/rms_row.cuh"

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
struct RopeKv {
  int64_t qs, ks, vs;  // row strides of q, k, v
  const int32_t* pos;
  const float* inv_freq;
  const int32_t* slots;
  int64_t hq, hkv, dim, half;
  bool interleaved;
  float mscale;
  int64_t s_count, head_stride;
};

// Head hh (q heads, then k, then v) of token t by `width` threads (this one is `lane`), its values
// first multiplied by `sc` (rows of an un-normalised projection, rms_scaled_rope_kv_write; exactly
// 1 otherwise, when q's unrotated tail is left as it is).
template <typename T, typename TC>
__device__ __forceinline__ void rope_kv_head(T* q, T* k, const T* v, TC* kc, TC* vc, const RopeKv& a, int64_t t, int64_t hh, float sc,
                                             bool scaled, int lane, int width) {
  const int64_t slot = a.slots[t];
  const bool store = slot >= 0 && slot < a.s_count;
  const int64_t dim = a.dim, half = a.half;
  if (hh < a.hq + a.hkv) {
    const bool is_k = hh >= a.hq;
    T* xr = is_k ? k + t * a.ks + (hh - a.hq) * dim : q + t * a.qs + hh * dim;
    TC* cr = is_k && store ? kc + (hh - a.hq) * a.head_stride + slot * dim : nullptr;
    for (int64_t i = lane; i < half; i += width) {
      float s, c;
      sincosf(static_cast<float>(a.pos[t]) * a.inv_freq[i], &s, &c);
      s *= a.mscale;
      c *= a.mscale;
      const int64_t ia = a.interleaved ? 2 * i : i, ib = a.interleaved ? 2 * i + 1 : i + half;
      const float va = to_f32(xr[ia]) * sc, vb = to_f32(xr[ib]) * sc;
      const T ra = from_f32<T>(rope_lo(va, vb, c, s)), rb = from_f32<T>(rope_hi(va, vb, c, s));
      xr[ia] = ra;
      xr[ib] = rb;
      if (cr) {
        cr[ia] = from_f32<TC>(to_f32(ra));
        cr[ib] = from_f32<TC>(to_f32(rb));
      }
    }
    if (scaled) {
      for (int64_t i = 2 * half + lane; i < dim; i += width) {
        const T y = from_f32<T>(to_f32(xr[i]) * sc);
        xr[i] = y;
        if (cr) cr[i] = from_f32<TC>(to_f32(y));
      }
    } else if (cr) {
      for (int64_t i = 2 * half + lane; i < dim; i += width) cr[i] = from_f32<TC>(to_f32(xr[i]));
    }
  } else if (store) {
    const int64_t h = hh - a.hq - a.hkv;
    const T* vr = v + t * a.vs + h * dim;
    TC* cr = vc + h * a.head_stride + slot * dim;
    for (int64_t i = lane; i < dim; i += width) cr[i] = from_f32<TC>(to_f32(vr[i]) * sc);
  }
}

template <typename T, typename TC>
static __global__ void rope_kv_kernel(T* q, T* k, const T* v, TC* kc, TC* vc, RopeKv a) {
  grid_dependents_may_launch();  // launched programmatically (common.cuh: programmatic_ops)
  grid_dependency_wait();
  const int64_t heads = a.hq + 2 * a.hkv;
  rope_kv_head(q, k, v, kc, vc, a, blockIdx.x / heads, blockIdx.x % heads, 1.0f, false, threadIdx.x, blockDim.x);
}

// rms_scaled_rope_kv_write: block (t, g) takes heads g * kScaledHeads .. of token t, kScaledLanes
// threads per head, all scaled by the inverse rms of x's row t (rms_norm's float32 sum,
// rms_row.cuh), computed once per block.
constexpr int64_t kScaledHeads = 8;
constexpr int kScaledLanes = 64;
template <typename T, typename TC>
static __global__ void rope_kv_scaled_kernel(T* q, T* k, const T* v, TC* kc, TC* vc, RopeKv a, const T* x, int64_t hd, float eps) {
  grid_dependents_may_launch();  // launched programmatically (common.cuh: programmatic_ops)
  grid_dependency_wait();
  const int64_t heads = a.hq + 2 * a.hkv, groups = (heads + kScaledHeads - 1) / kScaledHeads;
  const int64_t t = blockIdx.x / groups, h0 = blockIdx.x % groups * kScaledHeads;
  const T* xr = x + t * hd;
  const float sc = rms_inv_row([&](int64_t i) { return to_f32(xr[i]); }, hd, eps);
  const int64_t hh = h0 + threadIdx.x / kScaledLanes;
  if (hh < heads) rope_kv_head(q, k, v, kc, vc, a, t, hh, sc, true, static_cast<int>(threadIdx.x % kScaledLanes), kScaledLanes);
}

// Whether q, k, v, the caches and the rope arguments fit the kernels above.
static bool rope_kv_fits(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                         const Tensor& slots, const Tensor& k_cache, const Tensor& v_cache) {
  const bool shapes = q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3 && k_cache.ndim() == 3 && v_cache.ndim() == 3 &&
                      k.dim(0) == q.dim(0) && v.dim(0) == q.dim(0) && k.dim(1) == v.dim(1) && q.dim(2) == k.dim(2) &&
                      v.dim(2) == k.dim(2) && k_cache.dim(0) == k.dim(1) && k_cache.dim(2) == k.dim(2) &&
                      v_cache.dim(0) == k.dim(1) && v_cache.dim(1) == k_cache.dim(1) && v_cache.dim(2) == k.dim(2) &&
                      k_cache.stride(0) == v_cache.stride(0) && k_cache.stride(1) == k.dim(2) && k_cache.stride(2) == 1 &&
                      v_cache.stride(1) == k.dim(2) && v_cache.stride(2) == 1;
  return shapes && q.device() == Device::kCUDA && k.device() == Device::kCUDA && v.device() == Device::kCUDA &&
         positions.device() == Device::kCUDA && slots.device() == Device::kCUDA && k_cache.device() == Device::kCUDA &&
         v_cache.device() == Device::kCUDA && args.inv_freq.defined() && args.inv_freq.device() == Device::kCUDA &&
         rows_dense(q) && rows_dense(k) && rows_dense(v) && positions.is_contiguous() && slots.is_contiguous() &&
         q.dtype() == k.dtype() && v.dtype() == k.dtype() && k_cache.dtype() == v_cache.dtype() &&
         positions.dtype() == DType::I32 && slots.dtype() == DType::I32 && args.inv_freq.dtype() == DType::F32 &&
         positions.numel() == q.dim(0) && slots.numel() == q.dim(0) && args.rot_dim > 0 && args.rot_dim % 2 == 0 &&
         args.rot_dim <= q.dim(2) && args.inv_freq.numel() == args.rot_dim / 2 && q.dim(0) * (q.dim(1) + 2 * k.dim(1)) <= INT32_MAX;
}

static RopeKv rope_kv_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                           const Tensor& slots, const Tensor& k_cache) {
  RopeKv a;
  a.qs = q.stride(0);
  a.ks = k.stride(0);
  a.vs = v.stride(0);
  a.pos = positions.ptr<int32_t>();
  a.inv_freq = args.inv_freq.ptr<float>();
  a.slots = slots.ptr<int32_t>();
  a.hq = q.dim(1);
  a.hkv = k.dim(1);
  a.dim = q.dim(2);
  a.half = args.rot_dim / 2;
  a.interleaved = args.interleaved;
  a.mscale = args.mscale;
  a.s_count = k_cache.dim(1);
  a.head_stride = k_cache.stride(0);
  return a;
}

void CudaBackend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                                const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  if (!rope_kv_fits(q, k, v, positions, args, slots, k_cache, v_cache)) {
    Backend::rope_kv_write(q, k, v, positions, args, slots, k_cache, v_cache);
    return;
  }
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&k_cache, "k_cache"}, {&v_cache, "v_cache"}})
    check_float(*t, "rope_kv_write", n);
  const int64_t rows = q.dim(0) * (q.dim(1) + 2 * k.dim(1));
  if (rows == 0) return;
  const int threads = q.dim(2) > 128 ? 128 : 64;
  const RopeKv a = rope_kv_args(q, k, v, positions, args, slots, k_cache);
  MLXB_FLOAT_SWITCH(q.dtype(), T, MLXB_FLOAT_SWITCH(k_cache.dtype(), TC,
      launch_kernel(rope_kv_kernel<T, TC>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, programmatic_ops("rope"),
          q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), k_cache.ptr<TC>(), v_cache.ptr<TC>(), a)));
  MLXB_CUDA_LAUNCHED("rope_kv_write");
}

void CudaBackend::rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                                           const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  const char* op = "rms_scaled_rope_kv_write";
  if (!rope_kv_fits(q, k, v, positions, args, slots, k_cache, v_cache) || x.device() != Device::kCUDA || x.ndim() != 2 ||
      !x.is_contiguous() || x.dim(0) != q.dim(0) || x.dim(1) == 0 || x.dtype() != q.dtype()) {
    Backend::rms_scaled_rope_kv_write(q, k, v, x, eps, positions, args, slots, k_cache, v_cache);
    return;
  }
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&k_cache, "k_cache"}, {&v_cache, "v_cache"}})
    check_float(*t, op, n);
  const int64_t heads = q.dim(1) + 2 * k.dim(1), blocks = q.dim(0) * ((heads + kScaledHeads - 1) / kScaledHeads);
  if (blocks == 0) return;
  const RopeKv a = rope_kv_args(q, k, v, positions, args, slots, k_cache);
  MLXB_FLOAT_SWITCH(q.dtype(), T, MLXB_FLOAT_SWITCH(k_cache.dtype(), TC,
      launch_kernel(rope_kv_scaled_kernel<T, TC>, dim3(static_cast<unsigned>(blocks)), dim3(kScaledHeads * kScaledLanes), 0, programmatic_ops("rope"),
          q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), k_cache.ptr<TC>(), v_cache.ptr<TC>(), a, x.ptr<T>(), x.dim(1), eps)));
  MLXB_CUDA_LAUNCHED("rms_scaled_rope_kv_write");
}

}  // namespace mlxb::cuda
