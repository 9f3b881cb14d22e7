// Internal to the tensor-core 4-bit GEMVs (qgemv_tc.cu, qgemv_tcf.cu, qgemv_tcp.cu): the mma wrappers, one
// group of a 16-row tile on the tensor cores, tile coordinates, the split-K epilogue and the
// cp.async helpers. See qgemv_tc.cu for the layout and the arithmetic.
#pragma once
#include <type_traits>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/qmm.cuh"
#include "backend/cuda/rms_row.cuh"

namespace mlxb::cuda::qmm::tc {

template <typename TX>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static constexpr uint32_t kMagic = 0x43004300u;  // 128.0 in both halves
  static constexpr uint32_t kOne = 0x3F803F80u;
  static constexpr float kOff = 128.0f;
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<__half> {
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024.0 in both halves
  static constexpr uint32_t kOne = 0x3C003C00u;
  static constexpr float kOff = 1024.0f;
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

template <int W>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&w)[W]) {
  if constexpr (W == 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  } else if constexpr (W == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x; w[1] = v.y;
  } else {
    w[0] = __ldg(p);
  }
}

constexpr int kMaxWarps = 16;
constexpr int kSplitTarget = 2112;  // warps per launch worth splitting K for (132 SMs x 16)

// Launch shape of qgemv_tcf / qgemv_tcp: K split in a power of two of warps (at most max_warps,
// while the launch has fewer than `target` warps and every split keeps >= 2 of the `units` stages
// of a row), 8 warps per block (whole tiles per block when K is split less than 8 ways).
struct SplitPlan {
  int splits = 1;
  int tpb = 8;  // tiles per block
  unsigned grid = 0;
  int threads = 0;
};
inline SplitPlan plan_splits(int64_t tiles, int64_t units, int max_warps, int64_t target) {
  SplitPlan sp;
  while (sp.splits < max_warps && tiles * sp.splits < target && units >= 2 * sp.splits) sp.splits *= 2;
  sp.tpb = sp.splits >= 8 ? 1 : 8 / sp.splits;
  sp.grid = static_cast<unsigned>(ceil_div(tiles, sp.tpb));
  sp.threads = 32 * sp.splits * sp.tpb;
  return sp;
}

// One group of one tile: the words of rows a and b, lane's x values, the rows' scales and biases.
// kPaired: each 8-value piece of x is already stored as the pairs (0, 4), (1, 5), (2, 6), (3, 7)
// that the nibbles of a word meet (see pair_x8), so no permute is needed here.
template <typename TX, int W, bool kPaired = false>
__device__ __forceinline__ void group_step(const uint32_t (&wa)[W], const uint32_t (&wb)[W], const uint4 (&xv)[W], float s_a, float b_a,
                                           float s_b, float b_b, float (&acc)[4]) {
  using M = Mma<TX>;
  float cw[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const uint4 v = xv[j];
    const uint32_t x0 = kPaired ? v.x : __byte_perm(v.x, v.z, 0x5410), x1 = kPaired ? v.y : __byte_perm(v.x, v.z, 0x7632);
    const uint32_t x2 = kPaired ? v.z : __byte_perm(v.y, v.w, 0x5410), x3 = kPaired ? v.w : __byte_perm(v.y, v.w, 0x7632);
    const uint32_t qa = wa[j], qb = wb[j];
    constexpr uint32_t kLo = 0x000F000Fu;
    const uint32_t a0 = (qa & kLo) | M::kMagic, a1 = ((qa >> 4) & kLo) | M::kMagic;
    const uint32_t a2 = ((qa >> 8) & kLo) | M::kMagic, a3 = ((qa >> 12) & kLo) | M::kMagic;
    const uint32_t b0 = (qb & kLo) | M::kMagic, b1 = ((qb >> 4) & kLo) | M::kMagic;
    const uint32_t b2 = ((qb >> 8) & kLo) | M::kMagic, b3 = ((qb >> 12) & kLo) | M::kMagic;
    M::run(cw, a0, b0, a1, b1, x0, x1);
    M::run(cw, a2, b2, a3, b3, x2, x3);
    M::run(cs, M::kOne, M::kOne, M::kOne, M::kOne, x0, x1);
    M::run(cs, M::kOne, M::kOne, M::kOne, M::kOne, x2, x3);
  }
  const float ba = b_a - M::kOff * s_a, bb = b_b - M::kOff * s_b;
  acc[0] = fmaf(s_a, cw[0], fmaf(ba, cs[0], acc[0]));
  acc[1] = fmaf(s_a, cw[1], fmaf(ba, cs[1], acc[1]));
  acc[2] = fmaf(s_b, cw[2], fmaf(bb, cs[0], acc[2]));
  acc[3] = fmaf(s_b, cw[3], fmaf(bb, cs[1], acc[3]));
}

// The 8 values v0..v7 of a 16-byte piece of x as group_step<kPaired> reads them.
__device__ __forceinline__ uint4 pair_x8(uint4 v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                    __byte_perm(v.y, v.w, 0x7632));
}

// The whole row of x into xs [K] (shared memory), every 16-byte piece paired as pair_x8, by every
// thread of the block (then a barrier). kNorm: normalised first, as rms_norm would (rms_row.cuh
// for the sum of squares, then rms_norm's per-element float32 expression with p.norm_w).
template <typename TX, bool kNorm>
__device__ __forceinline__ void stage_paired_x(const Params& p, uint4* xs) {
  const uint4* xv = static_cast<const uint4*>(p.x);
  float inv = 0.0f;
  if constexpr (kNorm) {
    const TX* x = static_cast<const TX*>(p.x);
    inv = rms_inv_row([&](int64_t i) { return to_f32(x[i]); }, p.K, p.eps);
  }
  const uint4* nv = static_cast<const uint4*>(p.norm_w);
  for (int i = threadIdx.x; i < static_cast<int>(p.K / 8); i += blockDim.x)
    xs[i] = pair_x8(kNorm ? rms_scale8<TX>(xv[i], __ldg(nv + i), inv, p.add_one) : xv[i]);
  __syncthreads();
}

// Where a warp works: its tile, its K split, the fragment rows a / b of its lane, and the weight
// row of tile row r (0..15; rows past the end are clamped, their results dropped).
struct TileCoord {
  int lane, warp, g, t, local_tile, split;
  int64_t tile;
};

__device__ __forceinline__ TileCoord tile_coord(int splits, int tiles_per_block) {
  TileCoord c;
  c.lane = threadIdx.x & 31;
  c.warp = threadIdx.x >> 5;
  c.g = c.lane >> 2;
  c.t = c.lane & 3;
  c.local_tile = c.warp / splits;
  c.split = c.warp % splits;
  c.tile = static_cast<int64_t>(blockIdx.x) * tiles_per_block + c.local_tile;
  return c;
}

template <bool kGated>
__device__ __forceinline__ int64_t tile_row(const Params& p, int64_t tile, int r) {
  if constexpr (kGated) {
    const int64_t n = min(tile * 8 + (r & 7), p.N - 1);
    return r < 8 ? n : p.N + n;
  } else {
    return min(tile * 16 + r, p.N - 1);
  }
}

// The low / high 16-bit float of a packed word as float (TS: bf16 or f16 scales).
template <typename TS>
__device__ __forceinline__ float lo16(uint32_t w) {
  if constexpr (std::is_same_v<TS, __nv_bfloat16>) return __uint_as_float(w << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xFFFFu)));
}
template <typename TS>
__device__ __forceinline__ float hi16(uint32_t w) {
  if constexpr (std::is_same_v<TS, __nv_bfloat16>) return __uint_as_float(w & 0xFFFF0000u);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// A warp's 16x8 accumulator fragment into its float[128] slot of the split-K reduction buffer.
__device__ __forceinline__ void store_partials(float* mine, const TileCoord& c, const float (&acc)[4]) {
  mine[c.g * 8 + 2 * c.t] = acc[0];
  mine[c.g * 8 + 2 * c.t + 1] = acc[1];
  mine[(c.g + 8) * 8 + 2 * c.t] = acc[2];
  mine[(c.g + 8) * 8 + 2 * c.t + 1] = acc[3];
}

// Split-K reduction through shared memory and the output (plain, or act(gate) * up).
template <typename TX, bool kGated, Activation A>
__device__ __forceinline__ void tile_epilogue(const Params& p, const TileCoord& c, int splits, const float (&acc)[4],
                                              float (*red)[128]) {
  float* mine = red[c.warp];
  store_partials(mine, c, acc);
  __syncthreads();
  if (c.split != 0) return;
  const float* part = red[c.local_tile * splits];
  TX* y = static_cast<TX*>(p.y);
  const int64_t n_out = p.N;
  if constexpr (kGated) {
    for (int e = c.lane; e < 64; e += 32) {
      const int r = e >> 3, col = e & 7;
      const int64_t n = c.tile * 8 + r;
      if (col >= p.M || n >= n_out) continue;
      float gs = 0.0f, us = 0.0f;
      for (int s = 0; s < splits; ++s) {
        gs += part[s * 128 + e];
        us += part[s * 128 + 64 + e];
      }
      if (p.bias) {
        gs += load_f(p.bias, p.bias_code, n);
        us += load_f(p.bias, p.bias_code, n_out + n);
      }
      const float gr = to_f32(from_f32<TX>(gs)), ur = to_f32(from_f32<TX>(us));
      y[col * n_out + n] = from_f32<TX>(activate<A>(gr) * ur);
    }
  } else {
    for (int e = c.lane; e < 128; e += 32) {
      const int r = e >> 3, col = e & 7;
      const int64_t n = c.tile * 16 + r;
      if (col >= p.M || n >= n_out) continue;
      float v = 0.0f;
      for (int s = 0; s < splits; ++s) v += part[s * 128 + e];
      if (p.bias) v += load_f(p.bias, p.bias_code, n);
      y[col * n_out + n] = from_f32<TX>(v);
    }
  }
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

}  // namespace mlxb::cuda::qmm::tc
