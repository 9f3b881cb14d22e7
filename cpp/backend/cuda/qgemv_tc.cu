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
#include <type_traits>

#include "backend/cuda/qgemv_tc.cuh"

namespace mlxb::cuda::qmm {

namespace {

using namespace tc;

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
// contributes SB contiguous bytes (SB / (16 W) groups), copied with cp.async in 16-byte pieces,
// SB / 16 lanes per row, so every load instruction reads whole 128-byte lines (the fragment
// layout read directly from global memory touches eight rows per instruction, 32 bytes each).
// NS stages per warp, NS - 1 of them in flight while one is computed; rows are padded so that
// the fragment reads are free of bank conflicts (pitch = SB + 32 bytes for 8-byte reads, + 64
// for 16-byte reads).
template <int W, int SB>
constexpr int stage_pitch() { return SB + (W == 2 ? 32 : 64); }

template <int W, int SB, int NS>
constexpr int warp_smem_bytes() { return NS * 16 * stage_pitch<W, SB>(); }

// Warps per block the shared memory allows (at most kMaxWarps).
template <int W, int SB, int NS>
constexpr int max_block_warps() {
  return (200 * 1024) / warp_smem_bytes<W, SB, NS>() >= kMaxWarps ? kMaxWarps : (200 * 1024) / warp_smem_bytes<W, SB, NS>();
}

template <typename TX, int W, bool kGated, Activation A, int SB, int NS>
__global__ void __launch_bounds__(kMaxWarps * 32) qgemv_tcs_kernel(Params p, int splits, int tiles_per_block) {
  constexpr int GB = 16 * W;          // bytes of one group in a row
  constexpr int U = SB / GB;          // groups per stage
  constexpr int P = stage_pitch<W, SB>();
  constexpr int kLanesPerRow = SB / 16;
  constexpr int kPieces = SB / 32;    // 16-byte pieces per lane and stage
  constexpr bool kPrefetch = U <= 4;  // x, scales and biases of a stage loaded before its wait
  __shared__ float red[kMaxWarps][128];
  extern __shared__ __align__(16) unsigned char stage_mem[];
  const TileCoord c = tile_coord(splits, tiles_per_block);
  unsigned char* stages = stage_mem + c.warp * warp_smem_bytes<W, SB, NS>();
  const int64_t groups = p.K / (32 * W), row_bytes = p.K / 2;
  const int64_t g0 = groups * c.split / splits, g1 = groups * (c.split + 1) / splits;
  const int64_t n_stages = (g1 - g0 + U - 1) / U;

  // Piece i of this lane: tile row (lane / kLanesPerRow) + (32 / kLanesPerRow) i, bytes
  // [16 (lane % kLanesPerRow), +16) of the row's SB in the stage.
  const int col = c.lane % kLanesPerRow;
  const int64_t col_group = col * 16 / GB;
  const unsigned char* base = reinterpret_cast<const unsigned char*>(p.packed) + g0 * GB + col * 16;
  auto issue = [&](int64_t s) {
    if (s < n_stages && g0 + s * U + col_group < g1) {
      unsigned char* d = stages + (s % NS) * 16 * P + col * 16;
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        const int r = c.lane / kLanesPerRow + (32 / kLanesPerRow) * i;
        cp_async16(d + r * P, base + tile_row<kGated>(p, c.tile, r) * row_bytes + s * SB);
      }
    }
    cp_async_commit();
  };

  const int64_t ra = tile_row<kGated>(p, c.tile, c.g), rb = tile_row<kGated>(p, c.tile, c.g + 8);
  const TX* xr = static_cast<const TX*>(p.x) + min(static_cast<int64_t>(c.g), p.M - 1) * p.K + c.t * 8 * W;
  const int64_t sa0 = ra * groups, sb0 = rb * groups;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) issue(s);
  for (int64_t s = 0; s < n_stages; ++s) {
    issue(s + NS - 1);  // into the slot consumed in iteration s - 1
    const int64_t gs0 = g0 + s * U;
    uint4 xv[kPrefetch ? U : 1][W];
    float sc[kPrefetch ? U : 1][4];
    auto load_side = [&](int u, uint4 (&xo)[W], float (&so)[4]) {
      const int64_t gi = min(gs0 + u, g1 - 1);
#pragma unroll
      for (int j = 0; j < W; ++j) xo[j] = __ldg(reinterpret_cast<const uint4*>(xr + gi * 32 * W + 8 * j));
      const bool ok = gs0 + u < g1;  // groups past the range contribute nothing
      so[0] = ok ? load_f(p.scales, p.sb_code, sa0 + gi) : 0.0f;
      so[1] = ok ? load_f(p.biases, p.sb_code, sa0 + gi) : 0.0f;
      so[2] = ok ? load_f(p.scales, p.sb_code, sb0 + gi) : 0.0f;
      so[3] = ok ? load_f(p.biases, p.sb_code, sb0 + gi) : 0.0f;
    };
    if constexpr (kPrefetch) {
#pragma unroll
      for (int u = 0; u < U; ++u) load_side(u, xv[u], sc[u]);
    }
    cp_async_wait<NS - 1>();
    __syncwarp();
    const unsigned char* st = stages + (s % NS) * 16 * P;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // Stale words of groups past the range are finite (magic | nibble) and meet zero scales.
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
      if constexpr (kPrefetch) {
        group_step<TX, W>(wa, wb, xv[u], sc[u][0], sc[u][1], sc[u][2], sc[u][3], acc);
      } else {
        uint4 x1[W];
        float s1[4];
        load_side(u, x1, s1);
        group_step<TX, W>(wa, wb, x1, s1[0], s1[1], s1[2], s1[3], acc);
      }
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  tile_epilogue<TX, kGated, A>(p, c, splits, acc, red);
}

template <typename TX, int W, bool kGated, Activation A, int SB, int NS>
void launch_staged(const Params& p, int64_t tiles, int64_t groups) {
  constexpr int kWarps = max_block_warps<W, SB, NS>();
  constexpr int kPerBlock = kWarps < 8 ? kWarps : 8;
  int splits = 1;
  while (splits * 2 <= kWarps && tiles * splits < kSplitTarget && groups >= 4 * splits) splits *= 2;
  const int tpb = splits >= kPerBlock ? 1 : kPerBlock / splits;
  const unsigned grid = static_cast<unsigned>(ceil_div(tiles, tpb));
  const int threads = 32 * splits * tpb;
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(qgemv_tcs_kernel<TX, W, kGated, A, SB, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kMaxWarps * warp_smem_bytes<W, SB, NS>() > 200 * 1024 ? 200 * 1024
                                                                                             : kMaxWarps * warp_smem_bytes<W, SB, NS>()));
    configured = true;
  }
  const size_t smem = static_cast<size_t>(threads / 32) * warp_smem_bytes<W, SB, NS>();
  qgemv_tcs_kernel<TX, W, kGated, A, SB, NS><<<grid, threads, smem, stream()>>>(p, splits, tpb);
}

template <typename TX, int W, bool kGated, Activation A>
void launch_tc(const Params& p) {
  const int64_t tiles = ceil_div(p.N, kGated ? 8 : 16);
  const int64_t groups = p.K / (32 * W);
  const int variant = gemv_variant();
  if (W == 1 || variant == 1) {
    int splits = 1;
    while (splits < kMaxWarps && tiles * splits < kSplitTarget && groups >= 4 * splits) splits *= 2;
    const int tpb = splits >= 8 ? 1 : 8 / splits;
    const unsigned grid = static_cast<unsigned>(ceil_div(tiles, tpb));
    qgemv_tc_kernel<TX, W, kGated, A><<<grid, 32 * splits * tpb, 0, stream()>>>(p, splits, tpb);
    return;
  }
  if constexpr (W == 2 && std::is_same_v<TX, __nv_bfloat16> && A == Activation::kSiLU) {
    // Timing variants (bf16, group size 64, plain or SiLU-gated only; see gemv_variant).
    if (variant == 3) return launch_staged<TX, W, kGated, A, 128, 5>(p, tiles, groups);
    if (variant == 4) return launch_staged<TX, W, kGated, A, 512, 2>(p, tiles, groups);
    if (variant == 5) return launch_staged<TX, W, kGated, A, 512, 3>(p, tiles, groups);
    if (variant == 6) return launch_staged<TX, W, kGated, A, 256, 4>(p, tiles, groups);
  }
  if constexpr (W != 1) launch_staged<TX, W, kGated, A, 128, 3>(p, tiles, groups);
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

bool qgemv_one_row(const Params& p, DType xd, bool gated, Activation act) {
  return qgemv_row(p, xd, gated, act, false) || qgemv_tma(p, xd, gated, act, false) || qgemv_tcp(p, xd, gated, act, 2, false, true);
}

// The default (variant 0) and variants 7-9, 11-14: qgemv_row, qgemv_tma or qgemv_tcp for M = 1, then qgemv_tcf;
// true when one ran.
static bool fast_paths(const Params& p, DType xd, bool gated, Activation act) {
  const int v = gemv_variant();
  if ((v == 0 || v == 14) && qgemv_row(p, xd, gated, act, v == 14)) return true;
  if ((v == 0 || v == 12) && qgemv_tma(p, xd, gated, act, v == 12)) return true;
  if ((v == 0 || v == 8 || v == 9 || v == 11 || v == 13) && qgemv_tcp(p, xd, gated, act, v == 9 ? 3 : 2, v == 11, v != 8)) return true;
  return (v == 0 || v == 7) && qgemv_tcf(p, xd, gated, act);
}

void qgemv_tc_b4(const Params& p, DType xd) {
  if (fast_paths(p, xd, false, Activation::kSiLU)) return;
  if (xd == DType::BF16) launch_gs<__nv_bfloat16, false, Activation::kSiLU>(p);
  else launch_gs<__half, false, Activation::kSiLU>(p);
  MLXB_CUDA_LAUNCHED("qmatmul (tensor-core gemv)");
}

void qgated_tc_b4(const Params& p, DType xd, Activation act) {
  if (fast_paths(p, xd, true, act)) return;
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
