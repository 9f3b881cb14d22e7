// paged_attention for bfloat16 pools with head_dim 64 or 128, at most 4 query heads per kv head
// and a power-of-two block size (the engine's usual case; paged_attention.cu runs the rest).
// Block = (row, kv head, query of the row), 8 warps. Compared with the generic kernel, each lane
// group (16 or 8 lanes per key, 8 head elements per lane) loads kU = 4 keys and their values
// (16-byte loads, kept as raw bf16) before using any of them, so four times as many loads are in
// flight per warp, and the online softmax rescales once per 4 keys instead of once per key. The
// key-to-warp assignment depends only on the row's own positions, so a row's result does not
// depend on the other rows of the launch.
#include <cuda_bf16.h>

#include <cstdlib>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/paged_attention.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kWarps = 8, kU = 4;

__device__ __forceinline__ void bf16x8(const uint4& u, float* v) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <int kLanes, int kG>
__global__ void __launch_bounds__(kWarps * 32)
    paged_bf16_kernel(const __nv_bfloat16* __restrict__ q, int64_t q_stride, const __nv_bfloat16* __restrict__ kpool,
                      const __nv_bfloat16* __restrict__ vpool, int64_t pool_stride, const int32_t* __restrict__ q_offset,
                      const int32_t* __restrict__ q_count, const int32_t* __restrict__ kv_len, const int32_t* __restrict__ table,
                      int64_t max_blocks, int bs_shift, int hq, int hkv, float scale, float softcap, bool causal, int window,
                      __nv_bfloat16* __restrict__ out) {
  constexpr int kD = kLanes * 8;
  constexpr int kKeysPerWarp = 32 / kLanes;           // lane groups per warp
  constexpr int kSpan = kKeysPerWarp * kU;            // keys of one warp iteration
  const int r = blockIdx.x, hk = blockIdx.y, qi = blockIdx.z;
  const int cnt = q_count[r];
  if (qi >= cnt) return;
  const int len = kv_len[r];
  const int qpos = len - cnt + qi;
  const int64_t qrow = static_cast<int64_t>(q_offset[r]) + qi;
  const int g = hq / hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / kLanes, part = lane % kLanes;
  const int bs_mask = (1 << bs_shift) - 1;

  float qv[kG][8];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h < g) {
      bf16x8(__ldg(reinterpret_cast<const uint4*>(q + qrow * q_stride + (hk * g + h) * kD + part * 8)), qv[h]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qv[h][e] = 0.0f;
    }
  }
  float m[kG], l[kG], acc[kG][8];
  paged_state_init<kG>(m, l, acc);
  const int j_hi = causal ? min(qpos + 1, len) : len;
  const int j_lo = window > 0 ? max(0, qpos - window + 1) : 0;
  const int32_t* trow = table + static_cast<int64_t>(r) * max_blocks;
  const __nv_bfloat16* kh = kpool + hk * pool_stride + part * 8;
  const __nv_bfloat16* vh = vpool + hk * pool_stride + part * 8;
  // Warp w takes keys [j_lo + (it * kWarps + w) * kSpan, + kSpan); lane group `sub` takes keys
  // sub, sub + kKeysPerWarp, ... of that span. Every lane runs the same iterations (shuffles).
  for (int jb = j_lo + warp * kSpan; jb < j_hi; jb += kWarps * kSpan) {
    uint4 kr[kU], vr[kU];
    bool valid[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int j = jb + u * kKeysPerWarp + sub;
      valid[u] = j < j_hi;
      if (valid[u]) {
        const int64_t slot = (static_cast<int64_t>(__ldg(trow + (j >> bs_shift))) << bs_shift) + (j & bs_mask);
        kr[u] = __ldg(reinterpret_cast<const uint4*>(kh + slot * kD));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(vh + slot * kD));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kG][kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      bf16x8(kr[u], kf);
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qv[h][e], kf[e], dot);
        s[h][u] = dot;
      }
    }
#pragma unroll
    for (int h = 0; h < kG; ++h)
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) s[h][u] += __shfl_xor_sync(0xffffffffu, s[h][u], o);
        s[h][u] = valid[u] ? score_transform(s[h][u], scale, softcap) : -INFINITY;
      }
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      float mn = m[h];
#pragma unroll
      for (int u = 0; u < kU; ++u) mn = fmaxf(mn, s[h][u]);
      if (mn == -INFINITY) continue;  // no visible key yet for this lane group
      const float a = __expf(m[h] - mn);  // m = -inf before the first key: 0
      l[h] *= a;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= a;
      m[h] = mn;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float vf[8];
      bf16x8(vr[u], vf);
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        const float p = s[h][u] == -INFINITY ? 0.0f : __expf(s[h][u] - m[h]);  // m[h] >= s when s is finite
        l[h] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(p, vf[e], acc[h][e]);
      }
    }
  }
  paged_merge_store<kLanes, kG, kWarps>(m, l, acc, g, hq, hk, qrow, out);
}

template <int kLanes, int kG>
void launch(dim3 grid, const __nv_bfloat16* q, int64_t q_stride, const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t stride,
            const PagedAttentionRows& rows, int bs_shift, int hq, int hkv, const AttentionArgs& args, __nv_bfloat16* out) {
  paged_bf16_kernel<kLanes, kG><<<grid, kWarps * 32, 0, stream()>>>(
      q, q_stride, k, v, stride, rows.q_offset.ptr<int32_t>(), rows.q_count.ptr<int32_t>(), rows.kv_len.ptr<int32_t>(),
      rows.block_table.ptr<int32_t>(), rows.block_table.dim(1), bs_shift, hq, hkv, args.scale, args.softcap, args.causal,
      static_cast<int>(args.window), out);
}

}  // namespace

// Called by CudaBackend::paged_attention after its checks; false when the shapes are not this
// kernel's (or MLXB_PAGED_GENERIC=1 asks for the generic one).
bool paged_attention_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                          const AttentionArgs& args, Tensor& out, dim3 grid) {
  static const bool generic = [] {
    const char* e = std::getenv("MLXB_PAGED_GENERIC");
    return e && e[0] == '1';
  }();
  const int64_t hq = q.dim(1), hkv = k.dim(0), d = q.dim(2), bs = rows.block_size;
  if (generic || q.dtype() != DType::BF16 || (d != 64 && d != 128) || hq / hkv > 4 || bs <= 0 || (bs & (bs - 1)) != 0) return false;
  int shift = 0;
  while ((int64_t{1} << shift) < bs) ++shift;
  using B = __nv_bfloat16;
  const B* qp = q.ptr<B>();
  const B* kp = k.ptr<B>();
  const B* vp = v.ptr<B>();
  B* op = out.ptr<B>();
  const int g = static_cast<int>(hq / hkv), ihq = static_cast<int>(hq), ihkv = static_cast<int>(hkv);
  const int64_t qs = q.stride(0), st = k.stride(0);
#define MLXB_PAGED_BF16(L)                                                                     \
  do {                                                                                         \
    if (g <= 1) launch<L, 1>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, op);      \
    else if (g <= 2) launch<L, 2>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, op); \
    else launch<L, 4>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, op);             \
  } while (0)
  if (d == 128) MLXB_PAGED_BF16(16);
  else MLXB_PAGED_BF16(8);
#undef MLXB_PAGED_BF16
  return true;
}

}  // namespace mlxb::cuda
