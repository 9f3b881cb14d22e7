// paged_attention for bfloat16 pools with head_dim 64 or 128, at most 4 query heads per kv head
// and a power-of-two block size (the engine's usual case; paged_attention.cu runs the rest).
//
// Decode rows (q_count == 1) take a split kernel (default; MLXB_PAGED_SPLIT=0 restores the
// single-block kernel below for every row, read at each call): flash-decoding over tensor cores.
// A row's n visible keys [j_lo, j_hi) are cut into ceil(n / U) splits (at most 32) of equal size
// rounded up to 128 keys (MLXB_PAGED_SPLIT_BALANCED=0: splits of per = U * ceil(n / (32 U)) keys
// and a short last one, the earlier rule); U = MLXB_PAGED_SPLIT_KEYS, a multiple of 128, default
// 640. On the H200, 32-row 8B decode shape (keys 512..640): 28.2 us with the second kernel and
// balanced 640, 29.0 with unit 512, 29.8 with the first kernel at unit 512, 35.3 single-block
// (cuda_ops_check --paged, NOTES.md). A function of the row's own length only. The second kernel
// (paged_split2_kernel, default; MLXB_PAGED_SPLIT_KERNEL=1 runs the first) is described at its
// definition; the first, paged_split_kernel: block = (row, kv head, split), 4 warps, each warp
// taking 32-key pieces of the split. A warp copies a piece's K, then V, into its own shared memory
// with cp.async (two groups: the scores start while V is in flight; the next piece's K comes in
// during the softmax and P V, its V during the next scores), computes S = q K^T with mma.sync m16n8k16 (the g query heads of the kv head
// are rows 0..g-1 of the 16-row A operand, f32 accumulation), an online softmax in the log2
// domain, and O += P V with P split into bf16 hi + lo parts (two mma, ~16-bit P, no bf16 rounding
// of the weights). The 4 warps merge through shared memory; with more than one split the block
// writes its (max, sum, output) to a workspace and the last block of the (row, kv head) combines
// the splits in index order (sync counters; a second kernel when there are too many columns).
// Rows with more than one query (short prefill chunks, batch-invariant prefill) keep the
// single-block kernel, launched beside it. Every choice depends on the row alone (its q_count,
// length, window), never on the other rows of the launch.
//
// Single-block kernel: block = (row, kv head, query of the row), 8 warps. Compared with the generic kernel, each lane
// group (16 or 8 lanes per key, 8 head elements per lane) loads kU = 4 keys and their values
// (16-byte loads, kept as raw bf16) before using any of them, so four times as many loads are in
// flight per warp, and the online softmax rescales once per 4 keys instead of once per key. The
// key-to-warp assignment depends only on the row's own positions, so a row's result does not
// depend on the other rows of the launch.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/smem_copy.cuh"
#include "backend/cuda/tma.cuh"

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
                      bool skip_single, __nv_bfloat16* __restrict__ out) {
  constexpr int kD = kLanes * 8;
  constexpr int kKeysPerWarp = 32 / kLanes;           // lane groups per warp
  constexpr int kSpan = kKeysPerWarp * kU;            // keys of one warp iteration
  const int r = blockIdx.x, hk = blockIdx.y, qi = blockIdx.z;
  const int cnt = q_count[r];
  if (qi >= cnt || (skip_single && cnt == 1)) return;  // skip_single: the split kernel has those rows
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
            const PagedAttentionRows& rows, int bs_shift, int hq, int hkv, const AttentionArgs& args, bool skip_single,
            __nv_bfloat16* out) {
  paged_bf16_kernel<kLanes, kG><<<grid, kWarps * 32, 0, stream()>>>(
      q, q_stride, k, v, stride, rows.q_offset.ptr<int32_t>(), rows.q_count.ptr<int32_t>(), rows.kv_len.ptr<int32_t>(),
      rows.block_table.ptr<int32_t>(), rows.block_table.dim(1), bs_shift, hq, hkv, args.scale, args.softcap, args.causal,
      static_cast<int>(std::min<int64_t>(args.window, INT32_MAX)), skip_single, out);
}


// ------------------------------------------------------------------ split kernel (decode rows)

constexpr int kSW = 4;                   // warps per split block
constexpr int kPiece = 32;               // keys per warp piece
constexpr int kChunk = kSW * kPiece;     // keys per split unit
constexpr int kMaxSplits = 32;

// Keys per split for n visible keys (n >= 1): a multiple of `unit`, at most kMaxSplits splits.
__host__ __device__ __forceinline__ int split_keys(int n, int unit) {
  return unit * ((n + unit * kMaxSplits - 1) / (unit * kMaxSplits));
}

template <int D>
struct SplitLayout {
  static constexpr int ld = D + 8;                     // halves per shared row (16 bytes of pad: ldmatrix without conflicts)
  static constexpr int piece = kPiece * ld;            // halves of one warp's K (or V) piece
  static constexpr size_t warp_bytes = 2 * piece * sizeof(uint16_t);
  static constexpr size_t bytes = kSW * warp_bytes;
  // The merge area reuses the K/V memory: [kSW][4][D] outputs, then [kSW][4] maxima and sums.
  static_assert(sizeof(float) * kSW * 4 * (D + 2) <= bytes, "merge area");
};

// (a, b) as bf16 hi parts in one register (lower half = a), and the rounding remainders as lo.
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 f = __bfloat1622float2(h);
  const __nv_bfloat162 r = __floats2bfloat162_rn(a - f.x, b - f.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&r);
}

// Combines `splits` (<= 32) partials base[s][h] = (max log2, sum, output[D]) of g heads and stores
// out[h * D + d] (the row's g heads): a warp per head, a lane per split for the maxima and sums
// (butterfly sums), the outputs summed in split order with every split's loads in flight.
template <int D>
__device__ __forceinline__ void combine_splits(const float* __restrict__ base, int splits, int g, __nv_bfloat16* __restrict__ out) {
  constexpr int kE = D / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int h = warp; h < g; h += warps) {
    const float* ph = base + static_cast<int64_t>(h) * (D + 2);
    const int64_t step = static_cast<int64_t>(g) * (D + 2);
    const float ms = lane < splits ? __ldcg(ph + lane * step) : -INFINITY;
    const float ls = lane < splits ? __ldcg(ph + lane * step + 1) : 0.0f;
    const float mx = warp_max(ms);
    const float w = ms == -INFINITY ? 0.0f : exp2f(ms - mx);
    const float l = warp_sum(ls * w);
    float acc[kE];
#pragma unroll
    for (int i = 0; i < kE; ++i) acc[i] = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < splits; ++sp) {
      const float ws = __shfl_sync(0xffffffffu, w, sp);
      const float* ps = ph + sp * step + 2;
#pragma unroll
      for (int i = 0; i < kE; ++i) acc[i] = fmaf(__ldcg(ps + lane + 32 * i), ws, acc[i]);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < kE; ++i) out[h * D + lane + 32 * i] = __float2bfloat16_rn(acc[i] * inv);
  }
}

struct TmaMaps {
  CUtensorMap k, v;
};

struct SplitArgs {
  const __nv_bfloat16* q;
  int64_t q_stride;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  int64_t pool_stride;
  const int32_t* q_offset;
  const int32_t* q_count;
  const int32_t* kv_len;
  const int32_t* table;
  int max_blocks;
  int unit;  // split unit in keys (a multiple of kChunk; MLXB_PAGED_SPLIT_KEYS, default 640)
  bool balanced;  // splits of equal size (see row_split)
  int bs_shift, hq, hkv;
  float scale_log2;  // scale * log2(e) without softcap, else scale
  float softcap;
  bool causal;
  int window;
  float* part;    // [R][hkv][gridDim.z][g][D + 2] (splits > 1 only)
  int* counters;  // [R * hkv] or nullptr (then paged_combine_kernel runs after)
  __nv_bfloat16* out;
  PagedRope rope;  // paged_split2_kernel: rope.pos set = q and the new k, v come un-rotated (PagedRope)
};

// A row's visible key range and its split geometry (the same in every kernel that needs it).
struct RowSplit {
  int j_lo, j_hi, per, splits;
};
__device__ __forceinline__ RowSplit row_split(const SplitArgs& a, int len) {
  const int qpos = len - 1;
  RowSplit rs;
  rs.j_hi = min(a.causal ? min(qpos + 1, len) : len, a.max_blocks << a.bs_shift);  // never past the table
  rs.j_lo = a.window > 0 ? max(0, qpos - a.window + 1) : 0;
  const int n = rs.j_hi - rs.j_lo;
  if (a.balanced) {
    // ceil(n / unit) splits (at most kMaxSplits) of equal size rounded up to kChunk keys.
    const int nn = max(n, 1), ns = min(kMaxSplits, (nn + a.unit - 1) / a.unit);
    rs.per = kChunk * ((nn + ns * kChunk - 1) / (ns * kChunk));
  } else {
    rs.per = split_keys(max(n, 1), a.unit);
  }
  rs.splits = n <= 0 ? 1 : (n + rs.per - 1) / rs.per;
  return rs;
}

// The end of both split kernels, after the warps' (max, sum, output) are in shared memory (mo
// [kSW][4][D], mm / ml [kSW][4], behind a barrier): merges the warps and stores the row's output,
// or writes the split's partial and, in the last block of the (row, kv head), combines them.
template <int D>
__device__ __forceinline__ void split_finish(const SplitArgs& a, const RowSplit& rs, int r, int hk, int split, int g, int64_t qrow,
                                             const float* mo, const float* mm, const float* ml, bool& s_last) {
  __nv_bfloat16* orow = a.out + (qrow * a.hq + static_cast<int64_t>(hk) * g) * D;
  float* base = a.part + (static_cast<int64_t>(r) * a.hkv + hk) * gridDim.z * g * (D + 2);
  for (int idx = threadIdx.x; idx < g * D; idx += kSW * 32) {
    const int h = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kSW; ++w) mx = fmaxf(mx, mm[w * 4 + h]);
    float sum = 0.0f, acc = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kSW; ++w) {
        const float f = exp2f(mm[w * 4 + h] - mx);
        sum += ml[w * 4 + h] * f;
        acc += mo[(w * 4 + h) * D + d] * f;
      }
    }
    if (rs.splits == 1) {
      orow[idx] = __float2bfloat16_rn(sum > 0.0f ? acc / sum : 0.0f);
    } else {
      float* pr = base + static_cast<int64_t>(split * g + h) * (D + 2);
      if (d == 0) {
        pr[0] = mx;
        pr[1] = sum;
      }
      pr[2 + d] = acc;
    }
  }
  if (rs.splits == 1 || !a.counters) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = a.counters + static_cast<int64_t>(r) * a.hkv + hk;
    s_last = atomicAdd(counter, 1) == rs.splits - 1;
    if (s_last) *counter = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  combine_splits<D>(base, rs.splits, g, orow);
}

template <int D, int kG>
__global__ void __launch_bounds__(kSW * 32, D == 128 ? 3 : 4) paged_split_kernel(SplitArgs a) {
  using L = SplitLayout<D>;
  constexpr int LD = L::ld, KS = D / 16, OB = D / 8, VEC = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ bool s_last;
  const int r = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
  // The row's scalars in one round trip.
  const int cnt = a.q_count[r], len = a.kv_len[r];
  const int64_t qrow = a.q_offset[r];
  if (cnt != 1) return;  // the single-block kernel's row
  const RowSplit rs = row_split(a, len);
  if (split >= rs.splits) return;
  const int s0 = rs.j_lo + split * rs.per, s1 = min(rs.j_hi, s0 + rs.per);
  const int g = a.hq / a.hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int bs_mask = (1 << a.bs_shift) - 1;
  const int32_t* trow = a.table + static_cast<int64_t>(r) * a.max_blocks;
  const __nv_bfloat16* kh = a.k + hk * a.pool_stride;
  const __nv_bfloat16* vh = a.v + hk * a.pool_stride;
  // Lane i looks up the pool block of key jb + i of a piece (0 past the piece); the copies take it
  // by shuffle. The first piece's lookups go out before the q loads, the next piece's during a piece.
  auto lookup = [&](int jb) {
    return jb < s1 && lane < min(kPiece, s1 - jb) ? __ldg(trow + ((jb + lane) >> a.bs_shift)) : 0;
  };
  auto copy = [&](const __nv_bfloat16* src, __nv_bfloat16* dst, int jb, int blk_l) {
    const int nk = min(kPiece, s1 - jb);
#pragma unroll
    for (int it = 0; it < kPiece * VEC / 32; ++it) {
      const int idx = lane + 32 * it, key = idx / VEC, c = idx % VEC;
      const int blk = __shfl_sync(0xffffffffu, blk_l, key);
      const bool ok = key < nk;
      const int64_t slot = (static_cast<int64_t>(blk) << a.bs_shift) + ((jb + key) & bs_mask);
      cp_async16(dst + key * LD + c * 8, ok ? src + slot * D + c * 8 : src, ok ? 16 : 0);
    }
  };
  int j0 = s0 + warp * kPiece;
  int blk_cur = lookup(j0);

  // q as A fragments: row lane / 4 is query head hk * g + lane / 4 (zero past g); rows 8..15 zero.
  const int hrow = lane >> 2;
  uint32_t qa[KS][2];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    if (hrow < g) {
      const __nv_bfloat16* qp = a.q + qrow * a.q_stride + static_cast<int64_t>(hk * g + hrow) * D + kk * 16 + (lane & 3) * 2;
      qa[kk][0] = __ldg(reinterpret_cast<const unsigned int*>(qp));
      qa[kk][1] = __ldg(reinterpret_cast<const unsigned int*>(qp + 8));
    } else {
      qa[kk][0] = qa[kk][1] = 0u;
    }
  }

  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + warp * L::warp_bytes);
  __nv_bfloat16* vs = ks + L::piece;
  float o[OB][4];
#pragma unroll
  for (int i = 0; i < OB; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  // K of piece i + 1 is copied while piece i's softmax and P V run, its V during piece i + 1's
  // scores (one commit group per copy, empty ones included, so wait_group<1> always means "all
  // but the newest copy").
  if (j0 < s1) copy(kh, ks, j0, blk_cur);
  cp_async_commit();
  if (j0 < s1) copy(vh, vs, j0, blk_cur);
  cp_async_commit();
  for (; j0 < s1; j0 += kSW * kPiece) {
    const int nk = min(kPiece, s1 - j0);
    const int jn = j0 + kSW * kPiece;
    const int blk_next = lookup(jn);
    cp_async_wait<1>();  // this lane's K copies (V may be in flight)
    __syncwarp();        // ... and every lane's

    // S = q K^T: 16 rows (heads) x 32 keys.
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816<__nv_bfloat16>(s[2 * np], qa[kk][0], 0u, qa[kk][1], 0u, b[0], b[1]);
        mma16816<__nv_bfloat16>(s[2 * np + 1], qa[kk][0], 0u, qa[kk][1], 0u, b[2], b[3]);
      }
    }
    // Row lane / 4's scores (elements 0, 1) in the log2 domain; keys past the piece masked.
    float mx = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = s[nb][e];
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x * a.scale_log2 / a.softcap) * 1.4426950408889634f;
        else x *= a.scale_log2;
        if (nb * 8 + (lane & 3) * 2 + e >= nk) x = -INFINITY;
        s[nb][e] = x;
        mx = fmaxf(mx, x);
      }
    __syncwarp();  // every lane is done reading K: the next piece's K may come in
    if (jn < s1) copy(kh, ks, jn, blk_next);
    cp_async_commit();
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float corr = exp2f(m - m_use);
    m = m_new;
    uint32_t phi[4], plo[4];
    float psum = 0.0f;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const float p0 = exp2f(s[nb][0] - m_use), p1 = exp2f(s[nb][1] - m_use);
      psum += p0 + p1;
      split2(p0, p1, phi[nb], plo[nb]);
    }
    l = l * corr + psum;
#pragma unroll
    for (int i = 0; i < OB; ++i) {
      o[i][0] *= corr;
      o[i][1] *= corr;
    }

    cp_async_wait<1>();  // V (the next K may be in flight)
    __syncwarp();
    // O += P V (P = hi + lo).
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dp * 16 + (lane >> 4) * 8);
        mma16816<__nv_bfloat16>(o[2 * dp], phi[2 * kk], 0u, phi[2 * kk + 1], 0u, b[0], b[1]);
        mma16816<__nv_bfloat16>(o[2 * dp + 1], phi[2 * kk], 0u, phi[2 * kk + 1], 0u, b[2], b[3]);
        mma16816<__nv_bfloat16>(o[2 * dp], plo[2 * kk], 0u, plo[2 * kk + 1], 0u, b[0], b[1]);
        mma16816<__nv_bfloat16>(o[2 * dp + 1], plo[2 * kk], 0u, plo[2 * kk + 1], 0u, b[2], b[3]);
      }
    }
    __syncwarp();  // every lane is done reading V: the next piece's V may come in
    if (jn < s1) copy(vh, vs, jn, blk_next);
    cp_async_commit();
  }
  cp_async_wait<0>();  // only empty groups can be left

  // Merge the warps (shared memory, reusing the K/V area), then store or write the partial.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();
  float* mo = reinterpret_cast<float*>(smem);  // [kSW][4][D]
  float* mm = mo + kSW * 4 * D;                // [kSW][4]
  float* ml = mm + kSW * 4;
  if (hrow < 4) {
#pragma unroll
    for (int nb = 0; nb < OB; ++nb) {
      mo[(warp * 4 + hrow) * D + nb * 8 + (lane & 3) * 2] = o[nb][0];
      mo[(warp * 4 + hrow) * D + nb * 8 + (lane & 3) * 2 + 1] = o[nb][1];
    }
    if ((lane & 3) == 0) {
      mm[warp * 4 + hrow] = m;
      ml[warp * 4 + hrow] = l;
    }
  }
  __syncthreads();
  split_finish<D>(a, rs, r, hk, split, g, qrow, mo, mm, ml, s_last);
}

// 16 bytes global -> shared, no zero fill (every copy of paged_split2_kernel reads a visible key).
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans_at(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The split kernel, second form (default; MLXB_PAGED_SPLIT_KERNEL=1 runs the first): the same
// blocks, key-to-warp assignment (32-key chunks, warp w taking chunks w, w + 4, ..), P = hi + lo
// and merge as paged_split_kernel, with a shorter chain of dependent loads per piece and fewer
// instructions and registers:
// - each warp streams 16-key halves of its chunks through a ring of four shared-memory slots
//   (K and V of both halves of a chunk; 17 KB per warp as before), so three copies are in flight
//   while one slot is used; the table entries of a chunk are loaded two chunks before its keys
//   are used (one chunk before its copies go out), the first two chunks' along with the row's
//   scalars when the split starts at key 0.
// - copies: lane i holds the pool slot of key i of a chunk (keys past the split repeat its last
//   key: visible, finite data that the mask weighs by 0, so no zero fill); four shuffles give lane
//   (q, c) = (lane / 8, lane % 8) the slots of keys q, q + 4, q + 8, q + 12 of a half, whose
//   16-byte chunks c, c + 8 it copies with immediate offsets (4 keys x 128 contiguous bytes per
//   instruction); K and V use the same slots.
// - O^T = V^T P^T: the head dims are the mma M dimension (ldmatrix.trans of V gives the A
//   fragments) and the query heads the 8-wide N; S's C fragments of two 8-key tiles are exactly the
//   B fragment of P^T, so the output takes D / 16 x 4 registers instead of D / 8 x 4 (rows 8..15 of
//   O were dead), and half the P V mma.
// - the online softmax runs per 16-key half; the rescale of O and l by exp2(m_old - m_new) runs
//   only when some head's maximum rose (a warp vote; when none did every factor is exactly 1).
//
// kRegK (MLXB_PAGED_REGK, see split_regk): the keys skip shared memory. Lane (g, t) loads 16-byte
// pieces t, t + 4, .. of key rows g and g + 8 of a half straight into registers (8 rows x 64
// contiguous bytes per load instruction), a whole chunk ahead (two register sets, one per half),
// and uses their words as the B fragments of S = q K^T; q's A fragments take the same head dims
// (q_dim), so the sums are the same products in another order of d. Only V goes through the ring.
// Register loads stream ~30 GB/s per SM where cp.async plateaus near 20-24 (cuda_ops_check
// --stream-probe, scripts/cuda/NOTES.md).
// kRegK false: keys through the ring; true: in registers, at most 2 blocks per SM at D = 128 (181
// registers). (A 3-blocks-per-SM form of it lost everywhere and was removed.)
//
// kMode kTmaMode (MLXB_PAGED_TMA, see split_tma; sm_90, block size >= 16, no window, no folded
// rope): each 16-key half of K and of V is one page of the pool (the half starts at a multiple of
// 16 keys), so lane 0 of the warp fetches it with 2-D tensor copies (boxes of 16 rows x 64 values,
// 128-byte swizzle, kmap / vmap over the pool as [kv heads * slots, D]) completing on one
// mbarrier per ring slot, instead of 32 lanes issuing 16-byte cp.async. Slots past the row's
// length come whole with the page: their K scores are masked as before, and the V rows past the
// visible keys are zeroed before P V (stale pool memory may hold NaN, and 0 * NaN is NaN).
constexpr int kRingMode = 0, kRegKMode = 1, kTmaMode = 2;
template <int D, int kG, int kMode = kRingMode>
__global__ void __launch_bounds__(kSW * 32, D == 128 ? (kMode == kRegKMode ? 2 : 3) : 4)
    paged_split2_kernel(SplitArgs a, const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap) {
  constexpr bool kRegK = kMode == kRegKMode, kTma = kMode == kTmaMode;
  using L = SplitLayout<D>;
  constexpr int LD = L::ld, KS = D / 16, DT = D / 16, CQ = D / 64;
  constexpr uint32_t kRow = LD * 2, kSlot = 16 * kRow;  // bytes per shared row, per ring slot (16 keys)
  static_assert(4 * kSlot == L::warp_bytes, "ring layout");
  constexpr int kStep = kSW * kPiece;  // keys between a warp's chunks
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = kTma ? align_1k(smem_raw) : smem_raw;  // swizzled boxes start on 1 KB
  __shared__ bool s_last;
  __shared__ uint64_t s_bar[kTma ? kSW : 1][4];  // kTma: one transaction barrier per ring slot
  // Launched programmatically (common.cuh: programmatic_ops): everything before
  // grid_dependency_wait() reads only what the step's inputs and earlier steps wrote (row scalars,
  // table, keys older than the row's newest); q and the newest key are read after it.
  grid_dependents_may_launch();
  const int r = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t* trow = a.table + static_cast<int64_t>(r) * a.max_blocks;
  // The first split of a row without a window starts at key 0: the table entries of its first
  // two chunks (keys warp * 32 + lane, + kStep) are loaded along with the row's scalars.
  const bool early = split == 0 && a.window <= 0;
  const int cap = a.max_blocks << a.bs_shift, j_e = warp * kPiece + lane;
  const int blk_e0 = early && j_e < cap ? __ldg(trow + (j_e >> a.bs_shift)) : 0;
  const int blk_e1 = early && j_e + kStep < cap ? __ldg(trow + ((j_e + kStep) >> a.bs_shift)) : 0;
  const int cnt = a.q_count[r], len = a.kv_len[r];
  const int64_t qrow = a.q_offset[r];
  if (cnt != 1) {  // the single-block kernel's row (every block waits, so the grid ends after its predecessor)
    grid_dependency_wait();
    return;
  }
  const RowSplit rs = row_split(a, len);
  if (split >= rs.splits) {
    grid_dependency_wait();
    return;
  }
  const int s0 = rs.j_lo + split * rs.per, s1 = min(rs.j_hi, s0 + rs.per);
  const int g = a.hq / a.hkv;
  const int gq = lane >> 2, t4 = lane & 3;
  const int bs_mask = (1 << a.bs_shift) - 1;
  const __nv_bfloat16* kh = a.k + hk * a.pool_stride + (lane & 7) * 8;
  const __nv_bfloat16* vh = a.v + hk * a.pool_stride + (lane & 7) * 8;
  const uint4* kh_reg = reinterpret_cast<const uint4*>(a.k + hk * a.pool_stride) + t4;
  // The head dim of q that fragment kk, register j (0: k-slots 2t, 2t + 1; 1: 2t + 8, 2t + 9)
  // of this lane meets: the plain layout, or kRegK's (16-byte piece t4 + 4 (kk / 2) of the row).
  auto q_dim = [&](int kk, int j) { return kRegK ? 8 * (t4 + 4 * (kk >> 1)) + 4 * (kk & 1) + 2 * j : kk * 16 + j * 8 + t4 * 2; };
  constexpr int KP = D / 32;  // kRegK: 16-byte pieces per key row and lane
  uint4 kreg[2][2][kRegK ? KP : 1];  // [half][8-key tile][piece]
  // kRegK: half h of the chunk whose slots slot_l holds (lane i: key i) into kreg[h].
  auto kload = [&](int h, int slot_l) {
    if constexpr (kRegK) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const int sl = __shfl_sync(0xffffffffu, slot_l, 16 * h + 8 * nb + gq);
        const uint4* src = kh_reg + static_cast<int64_t>(sl) * (D / 8);
#pragma unroll
        for (int i = 0; i < KP; ++i) kreg[h][nb][i] = __ldg(src + 4 * i);
      }
    }
  };
  // Lane i: the slot of key jb + min(i, last) of the chunk at jb (0 past the split).
  auto lookup = [&](int jb) {
    if (jb >= s1) return 0;
    const int j = jb + min(lane, s1 - jb - 1);
    return (__ldg(trow + (j >> a.bs_shift)) << a.bs_shift) + (j & bs_mask);
  };
  auto early_slot = [&](int jb, int blk) {  // the same from the entries loaded early (lane i: key jb + i)
    if (jb >= s1) return 0;
    const int i = min(lane, s1 - jb - 1);
    return (__shfl_sync(0xffffffffu, blk, i) << a.bs_shift) + ((jb + i) & bs_mask);
  };
  int j0 = s0 + warp * kPiece;
  int slot_a, slot_b;  // chunks j0, j0 + kStep
  if (early) {         // s0 == 0 here
    slot_a = early_slot(j0, blk_e0);
    slot_b = early_slot(j0 + kStep, blk_e1);
  } else {
    slot_a = lookup(j0);
    slot_b = lookup(j0 + kStep);
  }

  // Ring slot 2h holds K, 2h + 1 V of half h of the chunk in use.
  const uint32_t ring = smem_addr(smem + warp * L::warp_bytes);
  // kTma: slot s at ring + s * kTS holds 16 key rows as D / 64 boxes of 16 x 128 bytes, the 16-byte
  // chunk c of row r of a box at r * 128 + ((c ^ (r & 7)) * 16).
  constexpr uint32_t kTS = 16 * D * 2;
  static_assert(!kTma || (4 * kTS <= L::warp_bytes && L::warp_bytes % 1024 == 0), "tma ring layout");
  auto tsw = [](uint32_t base, int row, int chunk) {
    return base + static_cast<uint32_t>((chunk >> 3) * 2048 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  };
  uint64_t* bars = s_bar[kTma ? warp : 0];
  if constexpr (kTma) {
    if (lane == 0) {
      for (int i = 0; i < 4; ++i) mbar_init(bars + i, 1);
      mbar_init_fence();
    }
    __syncwarp();
  }
  // kTma: ring slot s gets the page of key 16 h of the chunk whose slots slot_l holds (lane i: key i).
  auto tma_fill = [&](int s, int slot_l, int h) {
    const int first = __shfl_sync(0xffffffffu, slot_l, 16 * h);
    if (lane == 0) {
      const CUtensorMap* map = (s & 1) ? &vmap : &kmap;
      const int row0 = static_cast<int>(hk * (a.pool_stride / D)) + first;
      fence_proxy_async();  // this slot's earlier reads and zero stores come before the copy
      mbar_expect(bars + s, kTS);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) tma_2d(smem + warp * L::warp_bytes + s * kTS + b * 2048, map, b * 64, row0, bars + s);
    }
  };
  uint32_t par = 0;  // kTma: the phase every slot's barrier completes next
  const uint32_t cp_off = (lane >> 3) * kRow + (lane & 7) * 16;                                // copies
  const uint32_t k_off = ((lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 16;       // ldmatrix K
  const uint32_t v_off = (((lane >> 4) & 1) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 16; // ldmatrix.trans V
  auto slots4 = [&](int slot_l, int h, int (&sp)[4]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) sp[p] = __shfl_sync(0xffffffffu, slot_l, 16 * h + (lane >> 3) + 4 * p);
  };
  auto copy = [&](const __nv_bfloat16* src, uint32_t dst, const int (&sp)[4]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const __nv_bfloat16* sr = src + static_cast<int64_t>(sp[p]) * D;
#pragma unroll
      for (int c = 0; c < CQ; ++c) cp_async16_at(dst + cp_off + p * 4 * kRow + c * 128, sr + c * 64);
    }
  };

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  auto first_copies = [&] {
    int sp[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      slots4(slot_a, h, sp);
      const bool has = j0 + 16 * h < s1;
      if constexpr (kTma) {
        if (has) {
          tma_fill(2 * h, slot_a, h);
          tma_fill(2 * h + 1, slot_a, h);
        }
        continue;
      }
      if (has) {
        if constexpr (kRegK) kload(h, slot_a);
        else copy(kh, ring + 2 * h * kSlot, sp);
      }
      cp_async_commit();
      if (has) copy(vh, ring + (2 * h + 1) * kSlot, sp);
      cp_async_commit();
    }
  };
  // The first chunk's copies touch keys j0 .. min(j0 + 31, s1 - 1); the step wrote key len - 1.
  const bool old_keys = min(j0 + 31, s1 - 1) < len - 1;
  if (old_keys) first_copies();
  grid_dependency_wait();
  // Folded rope (a.rope.pos): the row's cos / sin as rope_kv_write computes them; the block of the
  // split holding key len - 1 rotates kv head hk's new k and stores k and v at the row's slot,
  // before the barrier after which any warp may copy that key.
  __shared__ float2 s_cs[D / 2];
  const bool folded = a.rope.pos != nullptr;
  if (folded) {
    const float p = static_cast<float>(a.rope.pos[qrow]);
    for (int i = threadIdx.x; i < D / 2; i += kSW * 32) {
      float sn, cs;
      sincosf(p * a.rope.inv_freq[i], &sn, &cs);
      s_cs[i] = make_float2(cs * a.rope.mscale, sn * a.rope.mscale);
    }
    __syncthreads();
    if (split == rs.splits - 1) {
      const int64_t slot = a.rope.slots[qrow];
      if (slot >= 0 && slot < a.rope.s_count) {
        const __nv_bfloat16* kr = a.rope.k_new + qrow * a.rope.k_stride + hk * D;
        const __nv_bfloat16* vr = a.rope.v_new + qrow * a.rope.v_stride + hk * D;
        __nv_bfloat16* kc = const_cast<__nv_bfloat16*>(a.k) + hk * a.pool_stride + slot * D;
        __nv_bfloat16* vc = const_cast<__nv_bfloat16*>(a.v) + hk * a.pool_stride + slot * D;
        for (int i = threadIdx.x; i < D / 2; i += kSW * 32) {
          const int ia = a.rope.interleaved ? 2 * i : i, ib = a.rope.interleaved ? 2 * i + 1 : i + D / 2;
          const float x = __bfloat162float(kr[ia]), y = __bfloat162float(kr[ib]);
          kc[ia] = __float2bfloat16_rn(rope_lo(x, y, s_cs[i].x, s_cs[i].y));
          kc[ib] = __float2bfloat16_rn(rope_hi(x, y, s_cs[i].x, s_cs[i].y));
        }
        for (int i = threadIdx.x; i < D; i += kSW * 32) vc[i] = vr[i];
      }
      __syncthreads();
    }
  }
  if (!old_keys) first_copies();

  // q as A fragments (as in paged_split_kernel): row g = query head hk * g + g (zero past g).
  uint32_t qa[KS][2];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    if (gq < g) {
      const __nv_bfloat16* qp = a.q + qrow * a.q_stride + static_cast<int64_t>(hk * g + gq) * D;
      qa[kk][0] = __ldg(reinterpret_cast<const unsigned int*>(qp + q_dim(kk, 0)));
      qa[kk][1] = __ldg(reinterpret_cast<const unsigned int*>(qp + q_dim(kk, 1)));
    } else {
      qa[kk][0] = qa[kk][1] = 0u;
    }
  }
  // Folded rope of q: the lane holds head dims kk * 16 + j * 8 + t4 * 2 + {0, 1}; the pairs
  // (d, d + D/2) are fragments kk and kk + KS/2 of the same lane, (2i, 2i + 1) one register. Each
  // value is rotated and rounded to bf16 as rope_kv_write stores it.
  if (folded && gq < g) {
    auto lo_f = [](uint32_t w) { return __uint_as_float(w << 16); };
    auto hi_f = [](uint32_t w) { return __uint_as_float(w & 0xffff0000u); };
    auto pack = [](float lo, float hi) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&h);
    };
    if (a.rope.interleaved) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float2 c = s_cs[q_dim(kk, j) / 2];
          const float x = lo_f(qa[kk][j]), y = hi_f(qa[kk][j]);
          qa[kk][j] = pack(rope_lo(x, y, c.x, c.y), rope_hi(x, y, c.x, c.y));
        }
    } else {
#pragma unroll
      for (int kk = 0; kk < KS / 2; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int d0 = q_dim(kk, j);
          const float2 c0 = s_cs[d0], c1 = s_cs[d0 + 1];
          const uint32_t wa = qa[kk][j], wb = qa[kk + KS / 2][j];
          const float a0 = lo_f(wa), a1 = hi_f(wa), b0 = lo_f(wb), b1 = hi_f(wb);
          qa[kk][j] = pack(rope_lo(a0, b0, c0.x, c0.y), rope_lo(a1, b1, c1.x, c1.y));
          qa[kk + KS / 2][j] = pack(rope_hi(a0, b0, c0.x, c0.y), rope_hi(a1, b1, c1.x, c1.y));
        }
    }
  }

  for (; j0 < s1; j0 += kStep) {
    const int jn = j0 + kStep;
    const int slot_c = lookup(jn + kStep);  // used by the next chunk's copies, one chunk from now
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int jh = j0 + 16 * h;
      const bool live = jh < s1, next = jn + 16 * h < s1;
      const int nk = s1 - jh;  // keys of this half that are visible: min(16, nk)
      int spn[4];
      if constexpr (kTma) {
        if (live) mbar_wait(bars + 2 * h, par);
      } else {
        cp_async_wait<3>();  // this lane's K copies of the half (the three later copies may be in flight)
        __syncwarp();        // ... and every lane's
      }
      // S = q K^T: 16 rows (heads) x 16 keys, even and odd k-steps in separate accumulators.
      float sa[2][4], sb[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) sa[i][0] = sa[i][1] = sa[i][2] = sa[i][3] = sb[i][0] = sb[i][1] = sb[i][2] = sb[i][3] = 0.0f;
      if (live) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          uint32_t b[4];
          if constexpr (kRegK) {
            const uint4 w0 = kreg[h][0][kk >> 1], w1 = kreg[h][1][kk >> 1];
            b[0] = (kk & 1) ? w0.z : w0.x;
            b[1] = (kk & 1) ? w0.w : w0.y;
            b[2] = (kk & 1) ? w1.z : w1.x;
            b[3] = (kk & 1) ? w1.w : w1.y;
          } else if constexpr (kTma) {
            ldmatrix_x4_at(b, tsw(ring + 2 * h * kTS, (lane >> 4) * 8 + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
          } else {
            ldmatrix_x4_at(b, ring + 2 * h * kSlot + k_off + kk * 32);
          }
          float(&s)[2][4] = (kk & 1) ? sb : sa;
          mma16816<__nv_bfloat16>(s[0], qa[kk][0], 0u, qa[kk][1], 0u, b[0], b[1]);
          mma16816<__nv_bfloat16>(s[1], qa[kk][0], 0u, qa[kk][1], 0u, b[2], b[3]);
        }
      }
      __syncwarp();  // every lane is done reading K: the next chunk's K may come in
      slots4(slot_b, h, spn);
      if (next) {
        if constexpr (kRegK) kload(h, slot_b);  // this half's registers are free: the next chunk's keys
        else if constexpr (kTma) tma_fill(2 * h, slot_b, h);
        else copy(kh, ring + 2 * h * kSlot, spn);
      }
      cp_async_commit();
      uint32_t phi[2], plo[2];
      if (live) {
        float mx = -INFINITY;
        float sc[2][2];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float x = sa[nb][e] + sb[nb][e];
            if (a.softcap > 0.0f) x = a.softcap * tanhf(x * a.scale_log2 / a.softcap) * 1.4426950408889634f;
            else x *= a.scale_log2;
            if (nb * 8 + t4 * 2 + e >= nk) x = -INFINITY;
            sc[nb][e] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m, mx);
        if (__any_sync(0xffffffffu, m_new != m)) {
          const float corr = exp2f(m - (m_new == -INFINITY ? 0.0f : m_new));  // m = -inf: 0; unchanged: 1
          const float c0 = __shfl_sync(0xffffffffu, corr, t4 * 8), c1 = __shfl_sync(0xffffffffu, corr, t4 * 8 + 4);
          l *= corr;
#pragma unroll
          for (int i = 0; i < DT; ++i) {
            o[i][0] *= c0;
            o[i][1] *= c1;
            o[i][2] *= c0;
            o[i][3] *= c1;
          }
          m = m_new;
        }
        const float m_use = m == -INFINITY ? 0.0f : m;
        float psum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const float p0 = exp2f(sc[nb][0] - m_use), p1 = exp2f(sc[nb][1] - m_use);
          psum += p0 + p1;
          split2(p0, p1, phi[nb], plo[nb]);
        }
        l += psum;
      }
      if constexpr (kTma) {
        if (live) {
          mbar_wait(bars + 2 * h + 1, par);
          if (nk < 16) {  // rows past the visible keys: zeros, not whatever the pool held
            const uint32_t vs = ring + (2 * h + 1) * kTS;
            for (int i = lane; i < (16 - nk) * (D / 8); i += 32) {
              const int row = nk + i / (D / 8), c = i % (D / 8);
              asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(vs + (c >> 3) * 2048 + row * 128 + (c & 7) * 16),
                           "r"(0u)
                           : "memory");
            }
          }
          __syncwarp();
        }
      } else {
        cp_async_wait<3>();  // V of the half
        __syncwarp();
      }
      if (live) {
        // O^T += V^T P^T (P = hi + lo): A = 16 dims x 16 keys of V^T, B = 16 keys x 8 heads of P^T.
#pragma unroll
        for (int dp = 0; dp < DT; ++dp) {
          uint32_t av[4];
          if constexpr (kTma) ldmatrix_x4_trans_at(av, tsw(ring + (2 * h + 1) * kTS, ((lane >> 4) & 1) * 8 + (lane & 7), 2 * dp + ((lane >> 3) & 1)));
          else ldmatrix_x4_trans_at(av, ring + (2 * h + 1) * kSlot + v_off + dp * 32);
          mma16816<__nv_bfloat16>(o[dp], av[0], av[1], av[2], av[3], phi[0], phi[1]);
          mma16816<__nv_bfloat16>(o[dp], av[0], av[1], av[2], av[3], plo[0], plo[1]);
        }
      }
      __syncwarp();  // every lane is done reading V: the next chunk's V may come in
      if constexpr (kTma) {
        if (next) tma_fill(2 * h + 1, slot_b, h);
      } else {
        if (next) copy(vh, ring + (2 * h + 1) * kSlot, spn);
        cp_async_commit();
      }
    }
    slot_b = slot_c;
    par ^= 1u;
  }
  cp_async_wait<0>();  // only empty groups can be left

  // o[dp] = O^T rows (dims) 16 dp + g, + 8, columns (heads) 2t, 2t + 1; m, l of head g.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();
  float* mo = reinterpret_cast<float*>(smem);  // [kSW][4][D]
  float* mm = mo + kSW * 4 * D;                // [kSW][4]
  float* ml = mm + kSW * 4;
  if (t4 < 2) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float* mh = mo + (warp * 4 + t4 * 2 + e) * D + gq;
#pragma unroll
      for (int dp = 0; dp < DT; ++dp) {
        mh[dp * 16] = o[dp][e];
        mh[dp * 16 + 8] = o[dp][2 + e];
      }
    }
  }
  if (t4 == 0 && gq < 4) {
    mm[warp * 4 + gq] = m;
    ml[warp * 4 + gq] = l;
  }
  __syncthreads();
  split_finish<D>(a, rs, r, hk, split, g, qrow, mo, mm, ml, s_last);
}

// Without counters: one block per (row, kv head) combines that column's splits.
template <int D>
__global__ void paged_combine_kernel(SplitArgs a, int grid_splits) {
  const int r = blockIdx.x, hk = blockIdx.y;
  if (a.q_count[r] != 1) return;
  const RowSplit rs = row_split(a, a.kv_len[r]);
  if (rs.splits == 1) return;
  const int g = a.hq / a.hkv;
  const float* base = a.part + (static_cast<int64_t>(r) * a.hkv + hk) * grid_splits * g * (D + 2);
  combine_splits<D>(base, rs.splits, g, a.out + (static_cast<int64_t>(a.q_offset[r]) * a.hq + static_cast<int64_t>(hk) * g) * D);
}

// mode: kRingMode / kRegKMode / kTmaMode of paged_split2_kernel (maps: kTmaMode's, else unused).
template <int D, int kG>
void launch_split(SplitArgs a, int64_t rows, int64_t hkv, int splits, bool second, int mode, const TmaMaps& maps) {
  constexpr size_t bytes = SplitLayout<D>::bytes, tma_bytes = bytes + 1024;  // + the 1 KB alignment of the boxes
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    auto opt_in = [](auto kernel, size_t b) {
      MLXB_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(b)));
    };
    opt_in(paged_split_kernel<D, kG>, bytes);
    opt_in(paged_split2_kernel<D, kG, kRingMode>, bytes);
    opt_in(paged_split2_kernel<D, kG, kRegKMode>, bytes);
    if (tma_bytes <= static_cast<size_t>(max_smem_optin())) opt_in(paged_split2_kernel<D, kG, kTmaMode>, tma_bytes);
    configured = true;
  }
  dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(hkv), static_cast<unsigned>(splits));
  const dim3 block(kSW * 32);
  const bool pdl = programmatic_ops("paged");
  if (!second) paged_split_kernel<D, kG><<<grid, block, bytes, stream()>>>(a);
  else if (mode == kTmaMode) launch_kernel(paged_split2_kernel<D, kG, kTmaMode>, grid, block, tma_bytes, pdl, a, maps.k, maps.v);
  else if (mode == kRegKMode) launch_kernel(paged_split2_kernel<D, kG, kRegKMode>, grid, block, bytes, pdl, a, maps.k, maps.v);
  else launch_kernel(paged_split2_kernel<D, kG, kRingMode>, grid, block, bytes, pdl, a, maps.k, maps.v);
  MLXB_CUDA_LAUNCHED("paged_attention (split)");
  if (splits > 1 && !a.counters) {
    paged_combine_kernel<D><<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(hkv)), 128, 0, stream()>>>(a, splits);
    MLXB_CUDA_LAUNCHED("paged_attention (combine)");
  }
}

bool split_enabled() {
  const char* e = std::getenv("MLXB_PAGED_SPLIT");  // read at each call (the A/B check flips it)
  return !(e && e[0] == '0');
}
// MLXB_PAGED_SPLIT_KERNEL=1: the first split kernel; otherwise paged_split2_kernel. Read at each call.
bool split_second() {
  const char* e = std::getenv("MLXB_PAGED_SPLIT_KERNEL");
  return !(e && e[0] == '1');
}
// MLXB_PAGED_REGK=1 (any value but empty or starting with '0'): paged_split2_kernel loads the
// keys into registers (kRegK), not through the ring. Read at each call (the checks flip it).
bool split_regk() {
  const char* e = std::getenv("MLXB_PAGED_REGK");
  return e && e[0] && e[0] != '0';
}
// paged_split2_kernel fetches whole pages with tensor copies (kTmaMode) where it can (sm_90,
// block size >= 16, no window, no folded rope); MLXB_PAGED_TMA=0 keeps the cp.async ring. Read at
// each call.
bool split_tma() {
  const char* e = std::getenv("MLXB_PAGED_TMA");
  return !(e && e[0] == '0');
}

// A pool [kv heads, slots, D] as a 2-D tensor map [kv heads * slots, D] with boxes of 16 rows x
// 64 values (128-byte swizzle), encoded once per (pool, shape) and kept: pools live as long as
// the engine, and a recorded step holds the map by value.
bool pool_map(const Tensor& pool, CUtensorMap& map) {
  struct Key {
    const void* p;
    int64_t rows, d;
    bool operator==(const Key& o) const { return p == o.p && rows == o.rows && d == o.d; }
  };
  static std::mutex mu;
  static std::vector<std::pair<Key, CUtensorMap>> maps;
  const Key key{pool.data(), pool.dim(0) * pool.dim(1), pool.dim(2)};
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, m] : maps)
    if (k == key) {
      map = m;
      return true;
    }
  if (!encode_tma_2d(&map, pool.data(), true, key.rows, key.d, key.d, 16, 64)) return false;
  if (maps.size() >= 256) maps.erase(maps.begin());  // freed pools' maps age out
  maps.emplace_back(key, map);
  return true;
}
// MLXB_PAGED_SPLIT_BALANCED=0: splits of `unit` keys and a short last one; otherwise splits of
// equal size (row_split). Read at each call.
bool split_balanced() {
  const char* e = std::getenv("MLXB_PAGED_SPLIT_BALANCED");
  return !(e && e[0] == '0');
}

// The split unit: MLXB_PAGED_SPLIT_KEYS (a multiple of kChunk, 128 .. 4096), default 640. A
// process-wide constant, so a row's splits still depend on its own length only.
constexpr int kDefaultUnit = 640;
int split_unit() {
  const char* e = std::getenv("MLXB_PAGED_SPLIT_KEYS");
  const long v = e ? std::strtol(e, nullptr, 10) : 0;
  return v >= kChunk && v <= 4096 && v % kChunk == 0 ? static_cast<int>(v) : kDefaultUnit;
}

}  // namespace

// Called by CudaBackend::paged_attention after its checks; false when the shapes are not this
// file's (or MLXB_PAGED_GENERIC=1 asks for the generic kernel).
bool paged_attention_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                          const AttentionArgs& args, Tensor& out, dim3 grid, const PagedRope* rope) {
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
  const int64_t r_count = rows.q_offset.numel(), max_blocks = rows.block_table.dim(1);
  const size_t smem = d == 128 ? SplitLayout<128>::bytes : SplitLayout<64>::bytes;
  const bool split = split_enabled() && smem <= static_cast<size_t>(max_smem_optin()) && (max_blocks << shift) <= INT32_MAX &&
                     reinterpret_cast<uintptr_t>(kp) % 16 == 0 && reinterpret_cast<uintptr_t>(vp) % 16 == 0 && st % 8 == 0 &&
                     st / d <= INT32_MAX;  // pool slots as int32 (paged_split2_kernel)
  // A folded rope needs the second split kernel for every row (one query each).
  if (rope && (!split || !split_second() || rows.max_q_count != 1)) return false;
  // Without the split kernel every row runs the single-block kernel; with it, only rows with more
  // than one query do (the launch is skipped when there are none).
  const bool single = !split || rows.max_q_count > 1;
#define MLXB_PAGED_BF16(L)                                                                                  \
  do {                                                                                                      \
    if (g <= 1) launch<L, 1>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, split, op);            \
    else if (g <= 2) launch<L, 2>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, split, op);       \
    else launch<L, 4>(grid, qp, qs, kp, vp, st, rows, shift, ihq, ihkv, args, split, op);                   \
  } while (0)
  if (single) {
    if (d == 128) MLXB_PAGED_BF16(16);
    else MLXB_PAGED_BF16(8);
  }
#undef MLXB_PAGED_BF16
  if (!split) return true;
  // Splits in the grid: enough for the longest row the table can hold (a row's own count is
  // computed in the kernel from its length; blocks past it exit at once).
  const int64_t cap = max_blocks << shift;
  const int unit = split_unit();
  const int splits = static_cast<int>(std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, ceil_div(cap, unit))));
  SplitArgs a;
  a.q = qp;
  a.q_stride = qs;
  a.k = kp;
  a.v = vp;
  a.pool_stride = st;
  a.q_offset = rows.q_offset.ptr<int32_t>();
  a.q_count = rows.q_count.ptr<int32_t>();
  a.kv_len = rows.kv_len.ptr<int32_t>();
  a.table = rows.block_table.ptr<int32_t>();
  a.max_blocks = static_cast<int>(max_blocks);
  a.unit = unit;
  a.balanced = split_balanced();
  const bool second = split_second();
  int mode = split_regk() ? kRegKMode : kRingMode;
  TmaMaps maps{};
  if (second && !rope && split_tma() && compute_major() >= 9 && smem + 1024 <= static_cast<size_t>(max_smem_optin()) && bs >= 16 &&
      args.window <= 0 && k.ndim() == 3 && v.ndim() == 3 &&
      k.stride(0) == k.dim(1) * d && v.stride(0) == v.dim(1) * d && k.dim(0) * k.dim(1) <= INT32_MAX && pool_map(k, maps.k) &&
      pool_map(v, maps.v))
    mode = kTmaMode;
  a.bs_shift = shift;
  a.hq = ihq;
  a.hkv = ihkv;
  a.softcap = args.softcap;
  a.scale_log2 = args.softcap > 0.0f ? args.scale : args.scale * 1.4426950408889634f;
  a.causal = args.causal;
  a.window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  a.out = op;
  a.part = nullptr;
  a.counters = nullptr;
  if (rope) a.rope = *rope;
  std::unique_ptr<Scratch> part;
  if (splits > 1) {
    part = std::make_unique<Scratch>(r_count * hkv * splits * g * (d + 2) * static_cast<int64_t>(sizeof(float)),
                                     "the paged attention split workspace");
    a.part = part->as<float>();
    a.counters = r_count * hkv <= kSyncCounters ? sync_counters() : nullptr;
  }
#define MLXB_PAGED_SPLIT_LAUNCH(D)                                  \
  do {                                                              \
    if (g <= 1) launch_split<D, 1>(a, r_count, hkv, splits, second, mode, maps);      \
    else if (g <= 2) launch_split<D, 2>(a, r_count, hkv, splits, second, mode, maps); \
    else launch_split<D, 4>(a, r_count, hkv, splits, second, mode, maps);             \
  } while (0)
  if (d == 128) MLXB_PAGED_SPLIT_LAUNCH(128);
  else MLXB_PAGED_SPLIT_LAUNCH(64);
#undef MLXB_PAGED_SPLIT_LAUNCH
  return true;
}

}  // namespace mlxb::cuda
