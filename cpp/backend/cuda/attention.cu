// Attention of ops.h on CUDA: argument checks and dispatch, plus the split-KV kernel used for
// decode (few query rows) and for float32. One warp per (query row, query head) walks a range of
// keys with an online softmax; when the keys are split over several blocks, partial (max, sum,
// output) triples go to a workspace and a second kernel combines them. Prefill in bf16/f16 goes
// to the tensor-core kernel in attention_flash.cu.
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

constexpr int kMaxDim = 256;            // head_dim limit of the split kernel
constexpr int kPerLane = kMaxDim / 32;  // head elements per lane
constexpr int kSplitWarps = 4;

// After a block has written its partial (max, sum, output) triples: the last block of the
// (t, g) column (a counter per column, reset by that block) combines the splits of the group's
// query heads, one warp per head, so that no second launch is needed. Partials written by other
// blocks are read past L1 (__ldcg). With at most 32 splits a lane holds one split's weight
// exp(m_s - m) and the output loop runs lanes over the head dimension with the splits' loads in
// flight together; the splits are summed in index order.
template <typename TQ>
__device__ __forceinline__ void combine_if_last(const float* part, int* counter, int splits, int64_t row0, int64_t rows,
                                                int64_t dim, TQ* __restrict__ out) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == splits - 1;
    if (last) *counter = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t stride = dim + 2;
  for (int64_t r = warp; r < rows; r += warps) {
    const int64_t row = row0 + r;
    const float* pr = part + row * splits * stride;
    TQ* orow = out + row * dim;
    if (splits <= 32) {
      const float ms = lane < splits ? __ldcg(pr + lane * stride) : -INFINITY;
      const float ls = lane < splits ? __ldcg(pr + lane * stride + 1) : 0.0f;
      const float m = warp_max(ms);
      const float wgt = ms != -INFINITY ? expf(ms - m) : 0.0f;
      const float l = warp_sum(ls * wgt);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float acc[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
#pragma unroll 8
      for (int s = 0; s < splits; ++s) {
        const float ws = __shfl_sync(0xffffffffu, wgt, s);
        const float* ps = pr + s * stride + 2;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int64_t d = lane + 32 * i;
          if (d < dim) acc[i] = fmaf(__ldcg(ps + d), ws, acc[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < dim) orow[d] = from_f32<TQ>(acc[i] * inv);
      }
      continue;
    }
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, __ldcg(pr + s * stride));
    float l = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = __ldcg(pr + s * stride);
      if (ms != -INFINITY) l += __ldcg(pr + s * stride + 1) * expf(ms - m);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = lane; d < dim; d += 32) {
      float acc = 0.0f;
      for (int s = 0; s < splits; ++s) {
        const float ms = __ldcg(pr + s * stride);
        if (ms != -INFINITY) acc += __ldcg(pr + s * stride + 2 + d) * expf(ms - m);
      }
      orow[d] = from_f32<TQ>(acc * inv);
    }
  }
}

// Block = (query row t, key/value head g, key split); its warps take the group's query heads in
// turn. Per 32 keys a warp scores one key per lane (the query row broadcast from shared memory),
// updates the running max/sum with two warp reductions, then accumulates P·V with lanes over the
// head dimension. Loads of the 32 keys are independent, so they overlap.
template <int kD, bool kVec, typename TQ, typename TKV>
static __global__ void __launch_bounds__(kSplitWarps * 32)
    split_kernel(const TQ* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v, const int32_t* __restrict__ q_pos,
                 const int32_t* __restrict__ k_pos, AttnShape sh, float scale, float softcap, bool causal, int window,
                 int64_t keys_per_split, const int32_t* __restrict__ kv_len, const int32_t* __restrict__ fresh,
                 float* __restrict__ part, int* __restrict__ counters, TQ* __restrict__ out) {
  (void)fresh;  // launched in stream order: nothing to read early
  __shared__ float qs[kSplitWarps][kMaxDim];
  grid_dependents_may_launch();  // a programmatically launched successor waits for this grid anyway
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t t = blockIdx.x / sh.hkv, g = blockIdx.x % sh.hkv;
  int64_t group = sh.hq / sh.hkv;
  int split = blockIdx.y, splits = gridDim.y;
  int64_t j0 = split * keys_per_split, j1 = min(sh.s, j0 + keys_per_split);
  if (kv_len) j1 = min(j1, static_cast<int64_t>(*kv_len));  // later slots hold no visible key
  const TKV* kh = k + g * sh.kv_stride;
  const TKV* vh = v + g * sh.kv_stride;
  int qp = q_pos[t];
  // kD > 0: head_dim known at compile time, so the per-key loops unroll and their loads overlap.
  const int64_t dim = kD > 0 ? kD : sh.d;
  for (int64_t hi = warp; hi < group; hi += kSplitWarps) {
    int64_t h = g * group + hi;
    int64_t row = t * sh.hq + h;
    const TQ* qr = q + row * dim;
    for (int64_t d = lane; d < dim; d += 32) qs[warp][d] = to_f32(qr[d]);
    __syncwarp();
    float o[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t jb = j0; jb < j1; jb += 32) {
      int64_t j = jb + lane;
      float s = -INFINITY;
      if (j < j1 && key_visible(k_pos[j], qp, causal, window)) {
        const TKV* kr = kh + j * dim;
        float dot = 0.0f;
        if constexpr (kVec) {
#pragma unroll
          for (int64_t d = 0; d < dim; d += 8) {
            float kv8[8];
            load8(kr + d, kv8);
#pragma unroll
            for (int e = 0; e < 8; ++e) dot = fmaf(qs[warp][d + e], kv8[e], dot);
          }
        } else {
          for (int64_t d = 0; d < dim; ++d) dot = fmaf(qs[warp][d], to_f32(kr[d]), dot);
        }
        s = score_transform(dot, scale, softcap);
      }
      float m_new = fmaxf(m, warp_max(s));
      if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
      float corr = expf(m - m_new);
      float p = expf(s - m_new);
      l = l * corr + warp_sum(p);
      m = m_new;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) o[i] *= corr;
      int n = j1 - jb < 32 ? static_cast<int>(j1 - jb) : 32;
#pragma unroll 8
      for (int jj = 0; jj < n; ++jj) {
        float pj = __shfl_sync(0xffffffffu, p, jj);
        const TKV* vr = vh + (jb + jj) * dim;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          int d = lane + 32 * i;
          if (d < dim) o[i] = fmaf(pj, to_f32(vr[d]), o[i]);
        }
      }
    }
    if (splits == 1) {
      float inv = l > 0.0f ? 1.0f / l : 0.0f;
      TQ* orow = out + row * sh.d;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int d = lane + 32 * i;
        if (d < sh.d) orow[d] = from_f32<TQ>(o[i] * inv);
      }
    } else {
      float* pr = part + (row * splits + split) * (sh.d + 2);
      if (lane == 0) { pr[0] = m; pr[1] = l; }
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        int d = lane + 32 * i;
        if (d < sh.d) pr[2 + d] = o[i];
      }
    }
    __syncwarp();
  }
  if (counters && splits > 1) combine_if_last(part, counters + blockIdx.x, splits, t * sh.hq + g * group, group, sh.d, out);
}

// Decode kernel for 2-byte K/V, compile-time head dim and group <= kSplitWarps (one query head
// per warp): per 32 keys the block stages the keys and values of its key/value head in shared
// memory with all loads in flight at once (one memory round trip per 32 keys instead of one for
// the keys and several for the values, and one load per block instead of one per query head),
// then each warp scores one key per lane and accumulates P·V with lanes over contiguous head
// elements. Every float operation is split_kernel's, in the same order: the results are the same.
template <int kD, typename TQ, typename TKV>
static __global__ void __launch_bounds__(kSplitWarps * 32)
    split_smem_kernel(const TQ* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v,
                      const int32_t* __restrict__ q_pos, const int32_t* __restrict__ k_pos, AttnShape sh, float scale, float softcap,
                      bool causal, int window, int64_t keys_per_split, const int32_t* __restrict__ kv_len,
                      const int32_t* __restrict__ fresh, float* __restrict__ part, int* __restrict__ counters, TQ* __restrict__ out) {
  constexpr int kRow = kD + 8;      // padded key row (16 bytes): lanes reading their own key spread over the banks
  constexpr int kVecs = kD / 8;     // 16-byte vectors per row
  constexpr int kE = kD / 32;       // value elements per lane (contiguous)
  __shared__ float qs[kSplitWarps][kD];
  __shared__ __align__(16) TKV ks[32 * kRow];
  __shared__ __align__(16) TKV vs[32 * kD];
  grid_dependents_may_launch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x / sh.hkv, g = blockIdx.x % sh.hkv;
  const int64_t group = sh.hq / sh.hkv;
  const int split = blockIdx.y, splits = gridDim.y;
  const int64_t j0 = split * keys_per_split;
  int64_t j1 = min(sh.s, j0 + keys_per_split);
  if (kv_len) j1 = min(j1, static_cast<int64_t>(*kv_len));
  const TKV* kh = k + g * sh.kv_stride;
  const TKV* vh = v + g * sh.kv_stride;
  const int qp = q_pos[t];
  const bool active = warp < group;
  const int64_t row = t * sh.hq + g * group + warp;
  constexpr int kLoads = 32 * kVecs / (kSplitWarps * 32);  // 16-byte loads of K (and of V) per thread and chunk
  uint4 kr[kLoads], vr[kLoads];
  auto chunk = [&](int64_t jb) { return j1 - jb < 32 ? static_cast<int>(j1 - jb) : 32; };  // keys of the chunk at jb
  // With `fresh` this grid was launched programmatically and may run beside the kernel that
  // writes q and the key at slot *fresh: the first chunk's other keys are loaded before waiting
  // for that kernel, q and that key after it.
  const int64_t fs = fresh ? static_cast<int64_t>(__ldg(fresh)) : -1;
  const bool early = fresh && j0 < j1;
  if (early) kv_chunk_load<kD, kSplitWarps * 32>(kh, vh, j0, chunk(j0), kr, vr, [&](int64_t j) { return j != fs; });
  grid_dependency_wait();
  if (early) kv_chunk_load<kD, kSplitWarps * 32>(kh, vh, j0, chunk(j0), kr, vr, [&](int64_t j) { return j == fs; });
  if (active) {
    const TQ* qr = q + row * kD;
    for (int d = lane; d < kD; d += 32) qs[warp][d] = to_f32(qr[d]);
  }
  float o[kE];
#pragma unroll
  for (int i = 0; i < kE; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t jb = j0; jb < j1; jb += 32) {
    const int n = chunk(jb);
    __syncthreads();  // the previous chunk is no longer read
    if (!(early && jb == j0)) kv_chunk_load<kD, kSplitWarps * 32>(kh, vh, jb, n, kr, vr, [](int64_t) { return true; });
    kv_chunk_store<kD, kSplitWarps * 32, kLoads, kRow>(ks, vs, n, kr, vr);
    __syncthreads();
    if (!active) continue;
    const int64_t j = jb + lane;
    float s = -INFINITY;
    if (lane < n && key_visible(k_pos[j], qp, causal, window)) {
      const TKV* krow = ks + lane * kRow;
      float dot = 0.0f;
#pragma unroll
      for (int d = 0; d < kD; d += 8) {
        float kv8[8];
        uint4 u = *reinterpret_cast<const uint4*>(krow + d);
        const TKV* e8 = reinterpret_cast<const TKV*>(&u);
#pragma unroll
        for (int e = 0; e < 8; ++e) kv8[e] = to_f32(e8[e]);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qs[warp][d + e], kv8[e], dot);
      }
      s = score_transform(dot, scale, softcap);
    }
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
    const float corr = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kE; ++i) o[i] *= corr;
#pragma unroll 8
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const TKV* vrow = vs + jj * kD + lane * kE;
#pragma unroll
      for (int i = 0; i < kE; ++i) o[i] = fmaf(pj, to_f32(vrow[i]), o[i]);
    }
  }
  if (active) {
    if (splits == 1) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      TQ* orow = out + row * kD + lane * kE;
#pragma unroll
      for (int i = 0; i < kE; ++i) orow[i] = from_f32<TQ>(o[i] * inv);
    } else {
      float* pr = part + (row * splits + split) * (kD + 2);
      if (lane == 0) { pr[0] = m; pr[1] = l; }
#pragma unroll
      for (int i = 0; i < kE; ++i) pr[2 + lane * kE + i] = o[i];
    }
  }
  if (counters && splits > 1) combine_if_last(part, counters + blockIdx.x, splits, t * sh.hq + g * group, group, kD, out);
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
  int64_t blocks = sh.t * sh.hkv;
  if (blocks > INT32_MAX) fail(ErrorCode::kUnsupported, "cuda attention: too many query rows");
  // Enough blocks to fill the GPU twice; each split keeps a multiple of 32 keys.
  int64_t want = ceil_div(static_cast<int64_t>(sm_count()) * 2, blocks);
  int64_t splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, ceil_div(sh.s, 32)));
  splits = std::min<int64_t>(splits, 65535);
  int64_t per = ceil_div(ceil_div(std::max<int64_t>(sh.s, 1), splits), 32) * 32;
  // MLXB_ATTN_SPLIT_KEYS (a multiple of 32): keys per split instead (for timing the trade between
  // blocks in flight and the splits' combine; read at each call, so at a graph's recording).
  if (const char* e = std::getenv("MLXB_ATTN_SPLIT_KEYS")) {
    const long v = std::strtol(e, nullptr, 10);
    if (v >= 32 && v % 32 == 0) per = v;
  }
  splits = ceil_div(std::max<int64_t>(sh.s, 1), per);
  dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  int window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  const int32_t* kv_len = args.kv_len.defined() ? args.kv_len.ptr<int32_t>() : nullptr;
  bool vec = sh.d % 8 == 0 && sh.kv_stride % 8 == 0 && reinterpret_cast<uintptr_t>(k.data()) % 16 == 0;
  const bool smem = vec && sizeof(TKV) == 2 && reinterpret_cast<uintptr_t>(v.data()) % 16 == 0 && sh.hq / sh.hkv <= kSplitWarps &&
                    (sh.d == 64 || sh.d == 128 || sh.d == 256);
  using Kernel = decltype(&split_kernel<0, false, TQ, TKV>);
  Kernel smem_kernel = nullptr;
  if constexpr (sizeof(TKV) == 2)
    smem_kernel = sh.d == 64 ? split_smem_kernel<64, TQ, TKV> : sh.d == 128 ? split_smem_kernel<128, TQ, TKV> : split_smem_kernel<256, TQ, TKV>;
  Kernel kernel = smem ? smem_kernel
                : !vec ? split_kernel<0, false, TQ, TKV>
                : sh.d == 64 ? split_kernel<64, true, TQ, TKV>
                : sh.d == 128 ? split_kernel<128, true, TQ, TKV>
                : sh.d == 256 ? split_kernel<256, true, TQ, TKV> : split_kernel<0, true, TQ, TKV>;
  // The shared-memory kernel is launched programmatically when the caller names the one slot the
  // kernels before it wrote (AttentionArgs::fresh_slot); see split_smem_kernel.
  const bool early = smem && args.fresh_slot.defined() && programmatic_ops("attn");
  const int32_t* fresh = early ? args.fresh_slot.ptr<int32_t>() : nullptr;
  const dim3 block(kSplitWarps * 32);
  if (splits == 1) {
    launch_kernel(kernel, grid, block, 0, early, q.ptr<TQ>(), k.ptr<TKV>(), v.ptr<TKV>(), q_pos.ptr<int32_t>(), k_pos.ptr<int32_t>(), sh,
                  args.scale, args.softcap, args.causal, window, per, kv_len, fresh, static_cast<float*>(nullptr),
                  static_cast<int*>(nullptr), out.ptr<TQ>());
    MLXB_CUDA_LAUNCHED("attention (split)");
    return;
  }
  Scratch part(rows * splits * (sh.d + 2) * static_cast<int64_t>(sizeof(float)), "the attention split workspace");
  // The last block of each (t, g) column combines the splits (one launch) while the per-column
  // counters suffice; otherwise a second kernel does.
  int* counters = blocks <= kSyncCounters ? sync_counters() : nullptr;
  launch_kernel(kernel, grid, block, 0, early, q.ptr<TQ>(), k.ptr<TKV>(), v.ptr<TKV>(), q_pos.ptr<int32_t>(), k_pos.ptr<int32_t>(), sh,
                args.scale, args.softcap, args.causal, window, per, kv_len, fresh, part.as<float>(), counters, out.ptr<TQ>());
  MLXB_CUDA_LAUNCHED("attention (split)");
  if (counters) return;
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
  check_contiguous(out, "attention", "out");
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
  if (args.kv_len.defined()) {
    check_device(args.kv_len, "attention", "kv_len");
    if (args.kv_len.dtype() != DType::I32 || args.kv_len.numel() != 1)
      fail(ErrorCode::kInvalidArgument, "cuda attention: kv_len must be one int32");
  }
  if (args.fresh_slot.defined()) {
    check_device(args.fresh_slot, "attention", "fresh_slot");
    if (args.fresh_slot.dtype() != DType::I32 || args.fresh_slot.numel() != 1)
      fail(ErrorCode::kInvalidArgument, "cuda attention: fresh_slot must be one int32");
  }
  if (out.dtype() != q.dtype() || v.dtype() != k.dtype())
    fail(ErrorCode::kUnsupported, "cuda attention: out must have q's dtype and v k's dtype");
  if (sh.d > kMaxDim) fail(ErrorCode::kUnsupported, "cuda attention: head_dim " + std::to_string(sh.d) + " > 256");
  if (sh.t == 0 || sh.hq == 0 || sh.d == 0) return;
  if (!q.is_contiguous()) {
    // Row-strided q (heads and dims contiguous, e.g. the q columns of a fused q/k/v projection):
    // the mma flash kernel reads it in place, the other kernels from a contiguous copy.
    if (q.stride(2) != 1 || q.stride(1) != sh.d || q.stride(0) < sh.hq * sh.d)
      fail(ErrorCode::kInvalidArgument, "cuda attention: q must be contiguous or [T, Hq, D] rows with contiguous heads: " + q.describe());
    if (sh.t >= 16 && flash_attention_mma(q, q.stride(0), k, v, q_pos, k_pos, args, sh, out)) return;
    Tensor qc = Tensor::empty(q.shape(), q.dtype(), Device::kCUDA);
    const size_t es = static_cast<size_t>(dtype_size(q.dtype())), row = static_cast<size_t>(sh.hq * sh.d) * es;
    MLXB_CUDA_OK(cudaMemcpy2DAsync(qc.data(), row, q.data(), static_cast<size_t>(q.stride(0)) * es, row, static_cast<size_t>(sh.t),
                                   cudaMemcpyDeviceToDevice, stream()));
    attention(qc, k, v, q_pos, k_pos, args, out);
    return;
  }
  if (cluster_decode_attention(q, k, v, q_pos, k_pos, args, sh, out)) return;
  if (flash_attention(q, k, v, q_pos, k_pos, args, sh, out)) return;
  MLXB_FLOAT_SWITCH(q.dtype(), TQ, MLXB_FLOAT_SWITCH(k.dtype(), TKV,
      split_attention<TQ, TKV>(q, k, v, q_pos, k_pos, args, sh, out)));
}

}  // namespace mlxb::cuda
