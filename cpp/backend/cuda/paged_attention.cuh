// Shared by the two paged decode kernels (paged_attention.cu, the generic one, and
// paged_attention_bf16.cu): the per-lane online-softmax state they start from and the merge that
// ends both. Layout both assume: a block of kWarps warps; in a warp, 32 / kLanes lane groups
// (`sub`) of kLanes lanes, lane `part` of a group holding head elements [8 * part, 8 * part + 8);
// each lane keeps a running max m, sum l and output acc for each of kG query heads.
// Not here: the key loops, which is where the two kernels differ.
#pragma once
#include "backend/cuda/attention.cuh"

namespace mlxb::cuda {

// What rope_paged_attention folds into the bf16 split decode kernel (paged_attention_bf16.cu):
// q and the rows' new k, v arrive un-rotated from the step's projection; the kernel rotates q as
// rope_kv_write would (rot_dim == head_dim), and the block holding a row's newest key rotates
// that kv head's k and writes k and v into the pool at the row's slot before any warp reads it.
struct PagedRope {
  const int32_t* pos = nullptr;    // [q rows]; nullptr: nothing folded
  const float* inv_freq = nullptr;  // [D / 2]
  float mscale = 1.0f;
  bool interleaved = false;
  const int32_t* slots = nullptr;  // [q rows]: the new key's pool slot; outside [0, s_count): not written
  int64_t s_count = 0;
  const __nv_bfloat16* k_new = nullptr;  // [q rows] x [Hkv, D] with row stride k_stride
  const __nv_bfloat16* v_new = nullptr;
  int64_t k_stride = 0, v_stride = 0;
};

// The empty state: max -inf, sum 0, output 0 for each query head.
template <int kG>
__device__ __forceinline__ void paged_state_init(float (&m)[kG], float (&l)[kG], float (&acc)[kG][8]) {
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }
}

// Merges the lane groups of each warp (lanes with the same `part`), then the warps through shared
// memory, and stores out[qrow, hk * g + h, :] = output / sum for the g query heads of kv head hk
// (0 where no key was visible). Every thread of the block must call it (shuffles, barrier).
template <int kLanes, int kG, int kWarps, typename T>
__device__ __forceinline__ void paged_merge_store(float (&m)[kG], float (&l)[kG], float (&acc)[kG][8], int g, int hq, int hk,
                                                  int64_t qrow, T* __restrict__ out) {
  constexpr int kD = kLanes * 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / kLanes, part = lane % kLanes;
#pragma unroll
  for (int o = kLanes; o < 32; o <<= 1) {
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], o);
      const float lo = __shfl_xor_sync(0xffffffffu, l[h], o);
      const float mn = fmaxf(m[h], mo);
      const float a = mn == -INFINITY ? 0.0f : __expf(m[h] - mn);
      const float b = mn == -INFINITY ? 0.0f : __expf(mo - mn);
      l[h] = l[h] * a + lo * b;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[h][e], o);
        acc[h][e] = acc[h][e] * a + ao * b;
      }
      m[h] = mn;
    }
  }
  __shared__ float s_acc[kWarps][kG][kD];
  __shared__ float s_m[kWarps][kG], s_l[kWarps][kG];
  if (sub == 0) {
#pragma unroll
    for (int h = 0; h < kG; ++h) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s_acc[warp][h][part * 8 + e] = acc[h][e];
      if (part == 0) {
        s_m[warp][h] = m[h];
        s_l[warp][h] = l[h];
      }
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < g * kD; idx += blockDim.x) {
    const int h = idx / kD, d = idx % kD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][h]);
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = __expf(s_m[w][h] - mx);
        sum += s_l[w][h] * f;
        o += s_acc[w][h][d] * f;
      }
    }
    out[(qrow * hq + hk * g + h) * kD + d] = from_f32<T>(sum > 0.0f ? o / sum : 0.0f);
  }
}

}  // namespace mlxb::cuda
