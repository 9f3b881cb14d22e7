// 4-bit quantized GEMV on the tensor cores (decode, M <= 8, bf16 or f16 activations), plain and
// with the gated-MLP epilogue (see qmm.cuh: qgemv_tc_b4, qgated_tc_b4).
//
// The CUDA-core GEMV of qgemv.cuh spends ~6 instructions per weight (unpack to float, FMA with x,
// sum of x); this one hands the products to mma.sync m16n8k16 (bf16 or f16 inputs, float32
// accumulation), which keeps the arithmetic exact where it matters: a nibble q becomes the
// 16-bit float OFF + q by one lop3 (OFF = 128 for bf16, 1024 for f16: 0x4300 | q, 0x6400 | q),
// x is already bf16/f16, so every product (OFF + q) * x is exact in the float32 accumulator.
// A second mma with all-ones A gives sum(x) over the same k slots, and per group and row
//   acc += scale * dot' + (bias - OFF * scale) * sum(x),   dot' = sum((OFF + q) * x)
// which is scale * sum(q x) + bias * sum(x), the format's value.
//
// Layout: a warp owns a tile of 16 weight rows (row groupID and groupID + 8 of the mma fragment;
// gated: 8 gate rows and the 8 matching up rows) and a contiguous range of quantization groups.
// For a group of GS = 32 * W values, lane (g, t) holds W words (8 nibbles each) of both of its
// rows at values [t * 8W, t * 8W + 8W) of the group; a word's nibble pairs (i, i + 4) are the
// 16-bit halves of one A register, and x is permuted the same way with prmt (the dot product does
// not care which k slot holds which value, as long as A and B agree). Every mma stays inside one
// group, so the group's scale and bias apply to its result. The mma's 8 columns are the M <= 8
// rows of x (lane groupID loads row min(g, M - 1); columns >= M are computed and dropped).
// Small matrices are split along K between the warps of a block (reduced in shared memory) so
// that every launch has enough warps to keep the memory system busy.
#include <cstdlib>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/qmm.cuh"

namespace mlxb::cuda::qmm {

namespace {

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

// One group of one tile: the words of rows a and b, lane's x values, the rows' scales and biases.
template <typename TX, int W>
__device__ __forceinline__ void group_step(const uint32_t (&wa)[W], const uint32_t (&wb)[W], const uint4 (&xv)[W], float s_a, float b_a,
                                           float s_b, float b_b, float (&acc)[4]) {
  using M = Mma<TX>;
  float cw[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const uint4 v = xv[j];
    const uint32_t x0 = __byte_perm(v.x, v.z, 0x5410), x1 = __byte_perm(v.x, v.z, 0x7632);
    const uint32_t x2 = __byte_perm(v.y, v.w, 0x5410), x3 = __byte_perm(v.y, v.w, 0x7632);
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

// Split-K reduction through shared memory and the output (plain, or act(gate) * up).
template <typename TX, bool kGated, Activation A>
__device__ __forceinline__ void tile_epilogue(const Params& p, const TileCoord& c, int splits, const float (&acc)[4],
                                              float (*red)[128]) {
  float* mine = red[c.warp];
  mine[c.g * 8 + 2 * c.t] = acc[0];
  mine[c.g * 8 + 2 * c.t + 1] = acc[1];
  mine[(c.g + 8) * 8 + 2 * c.t] = acc[2];
  mine[(c.g + 8) * 8 + 2 * c.t + 1] = acc[3];
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

// Weights straight from global memory into the fragment registers (W words of a row per lane
// and group). Used for group size 32 (4-byte pieces); see qgemv_tcs_kernel for the others.
// kGated: p.N is F (outputs per row of x), the weight has 2F rows ([gate; up]); tile rows are
// gate rows 8 * tile + g and up rows F + 8 * tile + g, and the output is act(gate) * up rounded
// as qmatmul then gated_act would round it.
template <typename TX, int W, bool kGated, Activation A>
__global__ void __launch_bounds__(kMaxWarps * 32) qgemv_tc_kernel(Params p, int splits, int tiles_per_block) {
  constexpr int U = W == 4 ? 2 : 4;  // groups in flight per lane
  __shared__ float red[kMaxWarps][128];
  const TileCoord c = tile_coord(splits, tiles_per_block);
  const int64_t ra = tile_row<kGated>(p, c.tile, c.g), rb = tile_row<kGated>(p, c.tile, c.g + 8);
  const int64_t groups = p.K / (32 * W), wpr = p.K / 8;
  const int64_t g0 = groups * c.split / splits, g1 = groups * (c.split + 1) / splits;
  const uint32_t* pa = p.packed + ra * wpr + c.t * W;
  const uint32_t* pb = p.packed + rb * wpr + c.t * W;
  const TX* xr = static_cast<const TX*>(p.x) + min(static_cast<int64_t>(c.g), p.M - 1) * p.K + c.t * 8 * W;
  const int64_t sa0 = ra * groups, sb0 = rb * groups;

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t grp = g0; grp < g1; grp += U) {
    uint32_t wa[U][W], wb[U][W];
    uint4 xv[U][W];
    float s_a[U], b_a[U], s_b[U], b_b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t gi = min(grp + u, g1 - 1);
      load_words<W>(pa + gi * 4 * W, wa[u]);
      load_words<W>(pb + gi * 4 * W, wb[u]);
#pragma unroll
      for (int j = 0; j < W; ++j) xv[u][j] = __ldg(reinterpret_cast<const uint4*>(xr + gi * 32 * W + 8 * j));
      s_a[u] = load_f(p.scales, p.sb_code, sa0 + gi);
      b_a[u] = load_f(p.biases, p.sb_code, sa0 + gi);
      s_b[u] = load_f(p.scales, p.sb_code, sb0 + gi);
      b_b[u] = load_f(p.biases, p.sb_code, sb0 + gi);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (grp + u >= g1) break;  // uniform over the warp
      group_step<TX, W>(wa[u], wb[u], xv[u], s_a[u], b_a[u], s_b[u], b_b[u], acc);
    }
  }
  tile_epilogue<TX, kGated, A>(p, c, splits, acc, red);
}

// Group sizes 64 and 128: the tile's weights go through shared memory. Per stage each tile row
// contributes 128 contiguous bytes (4 groups of 64 or 2 of 128), copied with cp.async in 16-byte
// pieces, eight lanes per row, so every load instruction reads four whole 128-byte lines (the
// fragment layout read directly from global memory touches eight rows per instruction, 32 bytes
// each, which measured at a third of the bandwidth). kStages stages per warp, kStages - 1 in
// flight; rows are padded (kPitch) so that the fragment reads are free of bank conflicts.
constexpr int kStages = 3;
constexpr int kStageRowBytes = 128;

template <int W>
constexpr int stage_pitch() { return W == 2 ? 160 : 192; }

template <int W>
constexpr int warp_smem_bytes() { return kStages * 16 * stage_pitch<W>(); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <typename TX, int W, bool kGated, Activation A>
__global__ void __launch_bounds__(kMaxWarps * 32) qgemv_tcs_kernel(Params p, int splits, int tiles_per_block) {
  constexpr int GB = 16 * W;                 // bytes of one group in a row
  constexpr int U = kStageRowBytes / GB;     // groups per stage
  constexpr int P = stage_pitch<W>();
  __shared__ float red[kMaxWarps][128];
  extern __shared__ __align__(16) unsigned char stage_mem[];
  const TileCoord c = tile_coord(splits, tiles_per_block);
  unsigned char* stages = stage_mem + c.warp * warp_smem_bytes<W>();
  const int64_t groups = p.K / (32 * W), row_bytes = p.K / 2;
  const int64_t g0 = groups * c.split / splits, g1 = groups * (c.split + 1) / splits;
  const int64_t n_stages = (g1 - g0 + U - 1) / U;

  // Copy assignment: piece i (0..3) of this lane is tile row (lane >> 3) + 4 i, bytes
  // [16 (lane & 7), +16) of the stage's 128.
  const int col = c.lane & 7;
  const unsigned char* src[4];
  int dst[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (c.lane >> 3) + 4 * i;
    src[i] = reinterpret_cast<const unsigned char*>(p.packed) + tile_row<kGated>(p, c.tile, r) * row_bytes + g0 * GB + col * 16;
    dst[i] = r * P + col * 16;
  }
  const int64_t col_group = col * 16 / GB;  // group of this lane's piece within a stage
  auto issue = [&](int64_t s) {
    if (s < n_stages && g0 + s * U + col_group < g1) {
      unsigned char* d = stages + (s % kStages) * 16 * P;
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async16(d + dst[i], src[i] + s * kStageRowBytes);
    }
    cp_async_commit();
  };

  const int64_t ra = tile_row<kGated>(p, c.tile, c.g), rb = tile_row<kGated>(p, c.tile, c.g + 8);
  const TX* xr = static_cast<const TX*>(p.x) + min(static_cast<int64_t>(c.g), p.M - 1) * p.K + c.t * 8 * W;
  const int64_t sa0 = ra * groups, sb0 = rb * groups;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int64_t s = 0; s < n_stages; ++s) {
    issue(s + kStages - 1);  // into the slot consumed in iteration s - 1
    const int64_t gs0 = g0 + s * U;
    uint4 xv[U][W];
    float s_a[U], b_a[U], s_b[U], b_b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t gi = min(gs0 + u, g1 - 1);
#pragma unroll
      for (int j = 0; j < W; ++j) xv[u][j] = __ldg(reinterpret_cast<const uint4*>(xr + gi * 32 * W + 8 * j));
      s_a[u] = load_f(p.scales, p.sb_code, sa0 + gi);
      b_a[u] = load_f(p.biases, p.sb_code, sa0 + gi);
      s_b[u] = load_f(p.scales, p.sb_code, sb0 + gi);
      b_b[u] = load_f(p.biases, p.sb_code, sb0 + gi);
    }
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const unsigned char* st = stages + (s % kStages) * 16 * P;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (gs0 + u >= g1) break;  // uniform over the warp
      uint32_t wa[W], wb[W];
      if constexpr (W == 4) {
        const uint4 va = *reinterpret_cast<const uint4*>(st + c.g * P + u * GB + c.t * 16);
        const uint4 vb = *reinterpret_cast<const uint4*>(st + (c.g + 8) * P + u * GB + c.t * 16);
        wa[0] = va.x; wa[1] = va.y; wa[2] = va.z; wa[3] = va.w;
        wb[0] = vb.x; wb[1] = vb.y; wb[2] = vb.z; wb[3] = vb.w;
      } else {
        const uint2 va = *reinterpret_cast<const uint2*>(st + c.g * P + u * GB + c.t * 8);
        const uint2 vb = *reinterpret_cast<const uint2*>(st + (c.g + 8) * P + u * GB + c.t * 8);
        wa[0] = va.x; wa[1] = va.y;
        wb[0] = vb.x; wb[1] = vb.y;
      }
      group_step<TX, W>(wa, wb, xv[u], s_a[u], b_a[u], s_b[u], b_b[u], acc);
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  tile_epilogue<TX, kGated, A>(p, c, splits, acc, red);
}

template <typename TX, int W, bool kGated, Activation A>
void launch_tc(const Params& p) {
  const int64_t tiles = ceil_div(p.N, kGated ? 8 : 16);
  const int64_t groups = p.K / (32 * W);
  int splits = 1;
  while (splits < kMaxWarps && tiles * splits < kSplitTarget && groups >= 4 * splits) splits *= 2;
  const int tpb = splits >= 8 ? 1 : 8 / splits;
  const unsigned grid = static_cast<unsigned>(ceil_div(tiles, tpb));
  const int threads = 32 * splits * tpb;
  if (W == 1 || gemv_variant() == 1) {
    qgemv_tc_kernel<TX, W, kGated, A><<<grid, threads, 0, stream()>>>(p, splits, tpb);
  } else {
    static bool configured = false;  // per instantiation; the attribute is process-wide
    if (!configured) {
      MLXB_CUDA_OK(cudaFuncSetAttribute(qgemv_tcs_kernel<TX, W, kGated, A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        kMaxWarps * warp_smem_bytes<W>()));
      configured = true;
    }
    const size_t smem = static_cast<size_t>(threads / 32) * warp_smem_bytes<W>();
    qgemv_tcs_kernel<TX, W, kGated, A><<<grid, threads, smem, stream()>>>(p, splits, tpb);
  }
}

template <typename TX, bool kGated, Activation A>
void launch_gs(const Params& p) {
  switch (p.group_size) {
    case 32: launch_tc<TX, 1, kGated, A>(p); break;
    case 64: launch_tc<TX, 2, kGated, A>(p); break;
    default: launch_tc<TX, 4, kGated, A>(p); break;
  }
}

}  // namespace

int gemv_variant() {
  const char* v = std::getenv("MLXB_QGEMV_VARIANT");
  return v ? std::atoi(v) : 0;
}

bool qgemv_tc_fits(const Params& p, int bits, DType xd) {
  return gemv_variant() != 2 && bits == 4 && (xd == DType::BF16 || xd == DType::F16) && p.M >= 1 && p.M <= 8 && p.N > 0 &&
         (p.group_size == 32 || p.group_size == 64 || p.group_size == 128) && p.K % p.group_size == 0 &&
         reinterpret_cast<uintptr_t>(p.packed) % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
}

void qgemv_tc_b4(const Params& p, DType xd) {
  if (xd == DType::BF16) launch_gs<__nv_bfloat16, false, Activation::kSiLU>(p);
  else launch_gs<__half, false, Activation::kSiLU>(p);
  MLXB_CUDA_LAUNCHED("qmatmul (tensor-core gemv)");
}

void qgated_tc_b4(const Params& p, DType xd, Activation act) {
#define MLXB_QG(A)                                                           \
  if (xd == DType::BF16) launch_gs<__nv_bfloat16, true, Activation::A>(p); \
  else launch_gs<__half, true, Activation::A>(p);
  switch (act) {
    case Activation::kSiLU: MLXB_QG(kSiLU) break;
    case Activation::kGeluExact: MLXB_QG(kGeluExact) break;
    case Activation::kGeluTanh: MLXB_QG(kGeluTanh) break;
  }
#undef MLXB_QG
  MLXB_CUDA_LAUNCHED("qgated_matmul (tensor-core gemv)");
}

}  // namespace mlxb::cuda::qmm
