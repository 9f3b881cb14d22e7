// Entry points shared by attention.cu (argument checks, split-KV SIMT kernel for decode and for
// float32) and attention_flash.cu (tensor-core flash attention for bf16/f16 prefill).
#pragma once
#include "backend/cuda/common.cuh"
#include "ops/ops.h"

namespace mlxb::cuda {

// Geometry shared by the kernels: q [T, Hq, D], k/v [Hkv, S, D] (head stride kv_stride elements),
// out [T, Hq, D].
struct AttnShape {
  int64_t t, hq, hkv, s, d, kv_stride;
};

// Mask of ops.h: key j is visible to a query at position qp when its slot holds a position
// (kp >= 0), causal => kp <= qp, window > 0 => qp - kp < window.
__device__ __forceinline__ bool key_visible(int kp, int qp, bool causal, int window) {
  return kp >= 0 && (!causal || kp <= qp) && (window <= 0 || qp - kp < window);
}

__device__ __forceinline__ float score_transform(float dot, float scale, float softcap) {
  float s = dot * scale;
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// Staging of a chunk of keys and values (2-byte elements, head dim kD, rows kD apart at kh / vh)
// by a block of kThreads threads, each holding kLoads 16-byte vectors of K and of V: vector
// idx = threadIdx.x + i * kThreads is row idx / (kD / 8), part idx % (kD / 8). The decode
// kernels (attention.cu split_smem_kernel, attention_cluster.cu) load a chunk into registers
// with kv_chunk_load, then store it with kv_chunk_store into shared rows (keys padded to kRow
// elements, values unpadded). Rows >= n, and rows `pick` rejects, are not loaded.
template <int kD, int kThreads, int kLoads, typename T, typename Pick>
__device__ __forceinline__ void kv_chunk_load(const T* kh, const T* vh, int64_t jb, int n, uint4 (&kr)[kLoads], uint4 (&vr)[kLoads],
                                              Pick pick) {
  constexpr int kVecs = kD / 8;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int idx = threadIdx.x + i * kThreads, key = idx / kVecs, c = idx % kVecs;
    if (key < n && pick(jb + key)) {
      kr[i] = __ldg(reinterpret_cast<const uint4*>(kh + (jb + key) * kD) + c);
      vr[i] = __ldg(reinterpret_cast<const uint4*>(vh + (jb + key) * kD) + c);
    }
  }
}
template <int kD, int kThreads, int kLoads, int kRow, typename T>
__device__ __forceinline__ void kv_chunk_store(T* ks, T* vs, int n, const uint4 (&kr)[kLoads], const uint4 (&vr)[kLoads]) {
  constexpr int kVecs = kD / 8;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int idx = threadIdx.x + i * kThreads, key = idx / kVecs, c = idx % kVecs;
    if (key < n) {
      *reinterpret_cast<uint4*>(ks + key * kRow + c * 8) = kr[i];
      *reinterpret_cast<uint4*>(vs + key * kD + c * 8) = vr[i];
    }
  }
}

// Returns false when the flash kernel does not cover the case (dtype, head dim, alignment).
// Tries the register-resident mma.sync kernel (attention_mma.cu) first, then the WMMA one.
bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                     const AttentionArgs& args, const AttnShape& sh, Tensor& out);

// The mma.sync kernel (attention_mma.cu) for q rows `q_stride` elements apart ([T, Hq, D] with
// heads and dims contiguous); false when it does not cover the case (MLXB_FLASH_MMA=0: never).
bool flash_attention_mma(const Tensor& q, int64_t q_stride, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const AttentionArgs& args, const AttnShape& sh, Tensor& out);

// One query row over 2-byte K/V with head dim 64/128/256 and up to 16 query heads per key/value
// head, on Hopper or later (attention_cluster.cu: a thread-block cluster per key/value head, its
// blocks combining their partial results in distributed shared memory); false when it does not
// cover the case; opt-in (MLXB_ATTN_CLUSTER=1) until measured on a GPU.
bool cluster_decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                              const AttentionArgs& args, const AttnShape& sh, Tensor& out);

}  // namespace mlxb::cuda
