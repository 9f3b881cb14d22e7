// The engine's batched-step ops on CUDA (ops.h; cpu/paged_attention.cc is the reference):
// - paged_attention: one launch for every row of a step. Block = (row, kv head, query of the
//   row); its 4 warps split the row's visible keys, reading each key's pool slot from the block
//   table. A key is scored by D/8 lanes (8 head elements each, 16-byte loads, shuffle-reduced dot)
//   for all query heads of the kv head at once, with an online softmax per head; the warps'
//   partial (max, sum, output) are merged through shared memory. Causal and sliding-window rows
//   only visit their visible key range. Blocks have 8 warps (more key loads in flight per
//   multiprocessor when a decode step has only a few dozen rows) wherever their merge buffers fit
//   in 32 KB of shared memory, else 4; the choice depends on the head shape only, so a row's
//   result never depends on how many rows share the launch.
//   q rows may be strided (row stride >= Hq * D, a view of a fused q/k/v projection).
// - kv_gather: out[h, i, :] = cache[h, slots[i], :] (prefill rows gather once, then use flash).
#include <cstdlib>
#include <initializer_list>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/paged_attention.cuh"

namespace mlxb::cuda {

// paged_attention_bf16.cu: the decode kernel for bf16 pools of the usual shapes (false: not taken,
// nothing launched). With `rope`, only the split kernel with the rotation folded in (see PagedRope).
bool paged_attention_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                          const AttentionArgs& args, Tensor& out, dim3 grid, const PagedRope* rope = nullptr);

namespace {

template <typename T>
__device__ __forceinline__ void load8_any(const T* p, float* v) {
  load8(p, v);
}

// kLanes lanes per key (head_dim = 8 * kLanes), at most kG query heads per kv head.
template <int kLanes, int kG, int kWarps, typename T>
__global__ void __launch_bounds__(kWarps * 32)
    paged_kernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ kpool, const T* __restrict__ vpool, int64_t pool_stride,
                 const int32_t* __restrict__ q_offset, const int32_t* __restrict__ q_count, const int32_t* __restrict__ kv_len,
                 const int32_t* __restrict__ table, int64_t max_blocks, int block_size, int hq, int hkv, float scale,
                 float softcap, bool causal, int window, T* __restrict__ out) {
  constexpr int kD = kLanes * 8;
  constexpr int kKeysPerWarp = 32 / kLanes;
  constexpr int kGroups = kWarps * kKeysPerWarp;
  const int r = blockIdx.x, hk = blockIdx.y, qi = blockIdx.z;
  const int cnt = q_count[r];
  if (qi >= cnt) return;
  const int len = kv_len[r];
  const int qpos = len - cnt + qi;
  const int64_t qrow = static_cast<int64_t>(q_offset[r]) + qi;
  const int g = hq / hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / kLanes, part = lane % kLanes;

  float qv[kG][8];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h < g) load8_any(q + qrow * q_stride + (hk * g + h) * kD + part * 8, qv[h]);
    else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qv[h][e] = 0.0f;
    }
  }
  float m[kG], l[kG], acc[kG][8];
  paged_state_init<kG>(m, l, acc);
  const int j_hi = causal ? min(qpos + 1, len) : len;
  const int j_lo = window > 0 ? max(0, qpos - window + 1) : 0;
  const int32_t* trow = table + static_cast<int64_t>(r) * max_blocks;
  const T* kh = kpool + hk * pool_stride;
  const T* vh = vpool + hk * pool_stride;
  // Every lane of a warp runs the same number of iterations (the dot shuffles need the whole
  // warp); lanes past the last key load nothing and skip the update.
#pragma unroll 2
  for (int jb = j_lo + warp * kKeysPerWarp; jb < j_hi; jb += kGroups) {
    const int j = jb + sub;
    const bool valid = j < j_hi;
    float kv8[8], vv8[8];
    if (valid) {
      const int64_t slot = static_cast<int64_t>(trow[j / block_size]) * block_size + j % block_size;
      load8_any(kh + slot * kD + part * 8, kv8);
      load8_any(vh + slot * kD + part * 8, vv8);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) kv8[e] = vv8[e] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      if (h >= g) break;  // uniform across the block
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) dot = fmaf(qv[h][e], kv8[e], dot);
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (!valid) continue;
      const float s = score_transform(dot, scale, softcap);
      const float mn = fmaxf(m[h], s);
      const float a = __expf(m[h] - mn);  // m = -inf before the first key: 0
      const float p = __expf(s - mn);
      l[h] = l[h] * a + p;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(p, vv8[e], acc[h][e] * a);
      m[h] = mn;
    }
  }
  paged_merge_store<kLanes, kG, kWarps>(m, l, acc, g, hq, hk, qrow, out);
}

template <int kLanes, typename T>
void launch_paged(int g, dim3 grid, const T* q, int64_t q_stride, const T* k, const T* v, int64_t stride,
                  const PagedAttentionRows& rows, int hq, int hkv, const AttentionArgs& args, T* out) {
  const int32_t* qo = rows.q_offset.ptr<int32_t>();
  const int32_t* qc = rows.q_count.ptr<int32_t>();
  const int32_t* kl = rows.kv_len.ptr<int32_t>();
  const int32_t* tb = rows.block_table.ptr<int32_t>();
  const int64_t mb = rows.block_table.dim(1);
  const int bs = static_cast<int>(rows.block_size), win = static_cast<int>(args.window);
#define MLXB_PAGED_W(G, W)                                                                                                 \
  paged_kernel<kLanes, G, W, T><<<grid, W * 32, 0, stream()>>>(q, q_stride, k, v, stride, qo, qc, kl, tb, mb, bs, hq, hkv, \
                                                               args.scale, args.softcap, args.causal, win, out)
  // 8 warps where their shared-memory merge buffers stay within 32 KB.
#define MLXB_PAGED(G)                                  \
  do {                                                 \
    if constexpr (8 * (G) * kLanes * 8 * 4 <= 32768) { \
      MLXB_PAGED_W(G, 8);                              \
    } else {                                           \
      MLXB_PAGED_W(G, 4);                              \
    }                                                  \
  } while (0)
  if (g <= 1) MLXB_PAGED(1);
  else if (g <= 2) MLXB_PAGED(2);
  else if (g <= 4) MLXB_PAGED(4);
  else MLXB_PAGED(8);
#undef MLXB_PAGED
#undef MLXB_PAGED_W
}

template <typename T>
__global__ void gather_kernel(const T* __restrict__ cache, int64_t stride0, const int32_t* __restrict__ slots, int64_t n,
                              int64_t d, T* __restrict__ out) {
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const T* src = cache + h * stride0 + static_cast<int64_t>(slots[i]) * d;
  T* dst = out + (h * n + i) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dst[j] = src[j];
}

void check_i32(const Tensor& t, const char* op, const char* name) {
  check_device(t, op, name);
  check_contiguous(t, op, name);
  if (t.dtype() != DType::I32) fail(ErrorCode::kInvalidArgument, std::string("cuda ") + op + ": " + name + " must be int32");
}

void check_pool(const Tensor& t, const char* op, const char* name) {
  check_device(t, op, name);
  check_float(t, op, name);
  if (t.ndim() != 3 || t.stride(2) != 1 || t.stride(1) != t.dim(2) || t.stride(0) < t.dim(1) * t.dim(2))
    fail(ErrorCode::kInvalidArgument, std::string("cuda ") + op + ": " + name + " must be [H, S, D] with contiguous rows: " +
                                          t.describe());
}

// The checks of paged_attention; returns its launch grid (x = 0: no rows).
dim3 paged_grid(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows, Tensor& out) {
  const char* op = "paged_attention";
  check_device(q, op, "q");
  check_device(out, op, "out"); check_contiguous(out, op, "out");
  check_pool(k, op, "k"); check_pool(v, op, "v");
  check_i32(rows.q_offset, op, "q_offset"); check_i32(rows.q_count, op, "q_count");
  check_i32(rows.kv_len, op, "kv_len"); check_i32(rows.block_table, op, "block_table");
  const int64_t r_count = rows.q_offset.numel();
  const bool q_rows = q.ndim() == 3 && q.stride(2) == 1 && q.stride(1) == q.dim(2) && q.stride(0) >= q.dim(1) * q.dim(2) &&
                      q.stride(0) % 8 == 0 && reinterpret_cast<uintptr_t>(q.data()) % 16 == 0;
  if (!q_rows || out.shape() != q.shape() || k.dim(2) != q.dim(2) || v.shape() != k.shape() || v.stride(0) != k.stride(0) ||
      rows.q_count.numel() != r_count || rows.kv_len.numel() != r_count || rows.block_table.ndim() != 2 ||
      rows.block_table.dim(0) != r_count || rows.block_size <= 0 || rows.max_q_count < 1)
    fail(ErrorCode::kInvalidArgument, "cuda paged_attention: shapes do not match: q " + q.describe() + ", pool " + k.describe() +
                                          ", out " + out.describe());
  const int64_t hq = q.dim(1), hkv = k.dim(0);
  if (hkv <= 0 || hq % hkv != 0 || hq / hkv > 8)
    fail(ErrorCode::kUnsupported, "cuda paged_attention: needs query heads a multiple (at most 8x) of kv heads");
  if (q.dtype() != k.dtype() || v.dtype() != k.dtype() || out.dtype() != q.dtype() || q.dtype() == DType::F16)
    fail(ErrorCode::kUnsupported, "cuda paged_attention: q, pool and out must all be float32 or all bfloat16");
  if (r_count == 0) return dim3(0, 1, 1);
  if (r_count > INT32_MAX || hkv > 65535 || rows.max_q_count > 65535)
    fail(ErrorCode::kUnsupported, "cuda paged_attention: too many rows or queries for one launch");
  return dim3(static_cast<unsigned>(r_count), static_cast<unsigned>(hkv), static_cast<unsigned>(rows.max_q_count));
}

}  // namespace

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                                  const AttentionArgs& args, Tensor& out) {
  const dim3 grid = paged_grid(q, k, v, rows, out);
  if (grid.x == 0) return;
  const int64_t hq = q.dim(1), hkv = k.dim(0), d = q.dim(2);
  const int g = static_cast<int>(hq / hkv);
  if (paged_attention_bf16(q, k, v, rows, args, out, grid)) {
    MLXB_CUDA_LAUNCHED("paged_attention");
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* qp = q.ptr<T>();
    const T* kp = k.ptr<T>();
    const T* vp = v.ptr<T>();
    T* op_ = out.ptr<T>();
    const int64_t st = k.stride(0), qs = q.stride(0);
    const int ihq = static_cast<int>(hq), ihkv = static_cast<int>(hkv);
    switch (d) {
      case 16: launch_paged<2, T>(g, grid, qp, qs, kp, vp, st, rows, ihq, ihkv, args, op_); break;
      case 32: launch_paged<4, T>(g, grid, qp, qs, kp, vp, st, rows, ihq, ihkv, args, op_); break;
      case 64: launch_paged<8, T>(g, grid, qp, qs, kp, vp, st, rows, ihq, ihkv, args, op_); break;
      case 128: launch_paged<16, T>(g, grid, qp, qs, kp, vp, st, rows, ihq, ihkv, args, op_); break;
      case 256: launch_paged<32, T>(g, grid, qp, qs, kp, vp, st, rows, ihq, ihkv, args, op_); break;
      default: fail(ErrorCode::kUnsupported, "cuda paged_attention: head_dim must be 16, 32, 64, 128 or 256");
    }
  };
  if (q.dtype() == DType::F32) run(float{});
  else run(__nv_bfloat16{});
  MLXB_CUDA_LAUNCHED("paged_attention");
}

// MLXB_PAGED_ROPE=1: rope_paged_attention folds the rotation into the split kernel; otherwise (the
// default: on the H200 the fold was level for 8B 32-stream serving and lower for the 1B in one run,
// scripts/cuda/NOTES.md) it runs rope_kv_write, then paged_attention. Read at each call.
static bool paged_rope_enabled() {
  const char* e = std::getenv("MLXB_PAGED_ROPE");
  return e && e[0] == '1';
}

void CudaBackend::rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope,
                                       const Tensor& slots, Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows,
                                       const AttentionArgs& args, Tensor& out) {
  auto on_cuda = [](std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts)
      if (t->device() != Device::kCUDA) return false;
    return true;
  };
  const DType B = DType::BF16;
  // Decode rows (one query each, one row per token) of bf16 tensors with full-width rotation;
  // anything else takes the two ops.
  const bool fits = paged_rope_enabled() && rows.max_q_count == 1 && q.ndim() == 3 && rows.q_offset.numel() == q.dim(0) &&
                    rows_dense(k) && rows_dense(v) &&
                    k.shape() == v.shape() && k.dim(0) == q.dim(0) && k.dim(2) == q.dim(2) && k_cache.ndim() == 3 &&
                    k.dim(1) == k_cache.dim(0) && q.dtype() == B && k.dtype() == B && v.dtype() == B && k_cache.dtype() == B &&
                    v_cache.dtype() == B && rope.inv_freq.defined() && rope.inv_freq.dtype() == DType::F32 &&
                    rope.rot_dim == q.dim(2) && rope.inv_freq.numel() == q.dim(2) / 2 && positions.dtype() == DType::I32 &&
                    slots.dtype() == DType::I32 && positions.is_contiguous() && slots.is_contiguous() &&
                    positions.numel() == q.dim(0) && slots.numel() == q.dim(0) &&
                    on_cuda({&q, &k, &v, &positions, &slots, &k_cache, &v_cache, &rope.inv_freq, &out});
  if (fits) {
    const dim3 grid = paged_grid(q, k_cache, v_cache, rows, out);
    PagedRope pr;
    pr.pos = positions.ptr<int32_t>();
    pr.inv_freq = rope.inv_freq.ptr<float>();
    pr.mscale = rope.mscale;
    pr.interleaved = rope.interleaved;
    pr.slots = slots.ptr<int32_t>();
    pr.s_count = k_cache.dim(1);
    pr.k_new = k.ptr<__nv_bfloat16>();
    pr.v_new = v.ptr<__nv_bfloat16>();
    pr.k_stride = k.stride(0);
    pr.v_stride = v.stride(0);
    if (grid.x != 0 && paged_attention_bf16(q, k_cache, v_cache, rows, args, out, grid, &pr)) {
      MLXB_CUDA_LAUNCHED("rope_paged_attention");
      return;
    }
  }
  Backend::rope_paged_attention(q, k, v, positions, rope, slots, k_cache, v_cache, rows, args, out);
}

void CudaBackend::kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out) {
  const char* op = "kv_gather";
  check_pool(cache, op, "cache");
  check_i32(slots, op, "slots");
  check_device(out, op, "out"); check_contiguous(out, op, "out");
  const int64_t n = slots.numel();
  if (out.ndim() != 3 || out.dim(0) != cache.dim(0) || out.dim(1) != n || out.dim(2) != cache.dim(2) || out.dtype() != cache.dtype())
    fail(ErrorCode::kInvalidArgument, "cuda kv_gather: out must be [H, N, D] in the cache's dtype: " + out.describe());
  if (n == 0 || cache.dim(0) == 0) return;
  if (n > INT32_MAX || cache.dim(0) > 65535) fail(ErrorCode::kUnsupported, "cuda kv_gather: too many slots or heads");
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cache.dim(0)));
  const int threads = cache.dim(2) >= 128 ? 128 : 32;
  MLXB_FLOAT_SWITCH(cache.dtype(), T,
      gather_kernel<T><<<grid, threads, 0, stream()>>>(cache.ptr<T>(), cache.stride(0), slots.ptr<int32_t>(), n, cache.dim(2),
                                                      out.ptr<T>()));
  MLXB_CUDA_LAUNCHED("kv_gather");
}

}  // namespace mlxb::cuda
