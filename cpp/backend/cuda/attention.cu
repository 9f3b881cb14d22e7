// Attention of ops.h on CUDA: argument checks and dispatch, plus the split-KV kernel used for
// decode (few query rows) and for float32. One warp per (query row, query head) walks a range of
// keys with an online softmax; when the keys are split over several blocks, partial (max, sum,
// output) triples go to a workspace and a second kernel combines them. Prefill in bf16/f16 goes
// to the tensor-core kernel in attention_flash.cu.
#include <algorithm>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

constexpr int kMaxDim = 256;            // head_dim limit of the split kernel
constexpr int kPerLane = kMaxDim / 32;  // head elements per lane
constexpr int kSplitWarps = 4;

template <typename TQ, typename TKV>
static __global__ void __launch_bounds__(kSplitWarps * 32)
    split_kernel(const TQ* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v, const int32_t* __restrict__ q_pos,
                 const int32_t* __restrict__ k_pos, AttnShape sh, float scale, float softcap, bool causal, int window,
                 int64_t keys_per_split, float* __restrict__ part, TQ* __restrict__ out) {
  int lane = threadIdx.x & 31;
  int64_t row = static_cast<int64_t>(blockIdx.x) * kSplitWarps + (threadIdx.x >> 5);  // t * hq + h
  if (row >= sh.t * sh.hq) return;
  int64_t t = row / sh.hq, h = row % sh.hq;
  int64_t g = h / (sh.hq / sh.hkv);
  int split = blockIdx.y, splits = gridDim.y;
  int64_t j0 = split * keys_per_split, j1 = min(sh.s, j0 + keys_per_split);
  const TQ* qr = q + row * sh.d;
  const TKV* kh = k + g * sh.kv_stride;
  const TKV* vh = v + g * sh.kv_stride;
  float qv[kPerLane], o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int d = lane + 32 * i;
    qv[i] = d < sh.d ? to_f32(qr[d]) : 0.0f;
    o[i] = 0.0f;
  }
  int qp = q_pos[t];
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = j0; j < j1; ++j) {
    if (!key_visible(k_pos[j], qp, causal, window)) continue;
    const TKV* kr = kh + j * sh.d;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      int d = lane + 32 * i;
      if (d < sh.d) dot = fmaf(qv[i], to_f32(kr[d]), dot);
    }
    float s = score_transform(warp_sum(dot), scale, softcap);
    float m_new = fmaxf(m, s);
    float corr = expf(m - m_new);  // 0 when m was -inf
    float p = expf(s - m_new);
    l = l * corr + p;
    const TKV* vr = vh + j * sh.d;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      int d = lane + 32 * i;
      if (d < sh.d) o[i] = fmaf(p, to_f32(vr[d]), o[i] * corr);
    }
    m = m_new;
  }
  if (splits == 1) {
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    TQ* orow = out + row * sh.d;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      int d = lane + 32 * i;
      if (d < sh.d) orow[d] = from_f32<TQ>(o[i] * inv);
    }
    return;
  }
  float* pr = part + (row * splits + split) * (sh.d + 2);
  if (lane == 0) { pr[0] = m; pr[1] = l; }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    int d = lane + 32 * i;
    if (d < sh.d) pr[2 + d] = o[i];
  }
}

// One block per (t, h): combines the splits' partial results.
template <typename TQ>
static __global__ void combine_kernel(const float* __restrict__ part, int splits, int64_t dim, TQ* __restrict__ out) {
  int64_t row = blockIdx.x;
  const float* pr = part + row * splits * (dim + 2);
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, pr[s * (dim + 2)]);
  float l = 0.0f;
  for (int s = 0; s < splits; ++s) {
    float ms = pr[s * (dim + 2)];
    if (ms != -INFINITY) l += pr[s * (dim + 2) + 1] * expf(ms - m);
  }
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      float ms = pr[s * (dim + 2)];
      if (ms != -INFINITY) acc += pr[s * (dim + 2) + 2 + d] * expf(ms - m);
    }
    out[row * dim + d] = from_f32<TQ>(acc * inv);
  }
}

template <typename TQ, typename TKV>
static void split_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                            const AttentionArgs& args, const AttnShape& sh, Tensor& out) {
  int64_t rows = sh.t * sh.hq;
  int64_t blocks = ceil_div(rows, kSplitWarps);
  // Enough blocks to fill the GPU a few times over; each split keeps at least 32 keys.
  int64_t want = std::max<int64_t>(1, static_cast<int64_t>(sm_count()) * 8 / std::max<int64_t>(blocks, 1));
  int64_t splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, sh.s / 32));
  splits = std::min<int64_t>(splits, 65535);
  int64_t per = ceil_div(std::max<int64_t>(sh.s, 1), splits);
  splits = ceil_div(std::max<int64_t>(sh.s, 1), per);
  dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  int window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  if (splits == 1) {
    split_kernel<TQ, TKV><<<grid, kSplitWarps * 32, 0, stream()>>>(q.ptr<TQ>(), k.ptr<TKV>(), v.ptr<TKV>(), q_pos.ptr<int32_t>(),
                                                                   k_pos.ptr<int32_t>(), sh, args.scale, args.softcap, args.causal,
                                                                   window, per, nullptr, out.ptr<TQ>());
    MLXB_CUDA_LAUNCHED("attention (split)");
    return;
  }
  Scratch part(rows * splits * (sh.d + 2) * static_cast<int64_t>(sizeof(float)), "the attention split workspace");
  split_kernel<TQ, TKV><<<grid, kSplitWarps * 32, 0, stream()>>>(q.ptr<TQ>(), k.ptr<TKV>(), v.ptr<TKV>(), q_pos.ptr<int32_t>(),
                                                                 k_pos.ptr<int32_t>(), sh, args.scale, args.softcap, args.causal,
                                                                 window, per, part.as<float>(), out.ptr<TQ>());
  MLXB_CUDA_LAUNCHED("attention (split)");
  combine_kernel<TQ><<<static_cast<unsigned>(rows), sh.d > 128 ? 256 : 128, 0, stream()>>>(part.as<float>(), static_cast<int>(splits),
                                                                                          sh.d, out.ptr<TQ>());
  MLXB_CUDA_LAUNCHED("attention (combine)");
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                            const AttentionArgs& args, Tensor& out) {
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    check_device(*t, "attention", n); check_float(*t, "attention", n);
  }
  check_device(q_pos, "attention", "q_pos"); check_device(k_pos, "attention", "k_pos");
  check_contiguous(q, "attention", "q"); check_contiguous(out, "attention", "out");
  check_contiguous(q_pos, "attention", "q_pos"); check_contiguous(k_pos, "attention", "k_pos");
  if (q_pos.dtype() != DType::I32 || k_pos.dtype() != DType::I32)
    fail(ErrorCode::kInvalidArgument, "cuda attention: positions must be int32");
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || out.numel() != q.numel())
    fail(ErrorCode::kInvalidArgument, "cuda attention: q [T,Hq,D], k/v [Hkv,S,D], out [T,Hq,D] expected: " + q.describe() + ", " +
                                          k.describe() + " -> " + out.describe());
  AttnShape sh{q.dim(0), q.dim(1), k.dim(0), k.dim(1), q.dim(2), k.stride(0)};
  if (k.dim(2) != sh.d || v.dim(0) != sh.hkv || v.dim(1) != sh.s || v.dim(2) != sh.d || v.stride(0) != sh.kv_stride ||
      k.stride(1) != sh.d || k.stride(2) != 1 || v.stride(1) != sh.d || v.stride(2) != 1 || sh.kv_stride < sh.s * sh.d)
    fail(ErrorCode::kInvalidArgument, "cuda attention: k and v must be [Hkv, S, D] views with one head stride: " + k.describe() + ", " +
                                          v.describe());
  if (sh.hkv == 0 || sh.hq % sh.hkv != 0)
    fail(ErrorCode::kInvalidArgument, "cuda attention: query heads must be a multiple of key/value heads");
  if (q_pos.numel() != sh.t || k_pos.numel() != sh.s) fail(ErrorCode::kInvalidArgument, "cuda attention: position counts do not match");
  if (out.dtype() != q.dtype() || v.dtype() != k.dtype())
    fail(ErrorCode::kUnsupported, "cuda attention: out must have q's dtype and v k's dtype");
  if (sh.d > kMaxDim) fail(ErrorCode::kUnsupported, "cuda attention: head_dim " + std::to_string(sh.d) + " > 256");
  if (sh.t == 0 || sh.hq == 0 || sh.d == 0) return;
  if (flash_attention(q, k, v, q_pos, k_pos, args, sh, out)) return;
  MLXB_FLOAT_SWITCH(q.dtype(), TQ, MLXB_FLOAT_SWITCH(k.dtype(), TKV,
      split_attention<TQ, TKV>(q, k, v, q_pos, k_pos, args, sh, out)));
}

}  // namespace mlxb::cuda
