// The staged tensor-core 4-bit GEMV with its per-group overhead taken out (MLXB_QGEMV_VARIANT=7;
// see qmm.cuh). A profile of qgemv_tcs_kernel (ncu, 8B gate+up, H200) showed it issue-bound at
// ~200 instructions per 16-row group: every scale and bias was a separate 2-byte load behind a
// runtime switch on the storage dtype, groups past the warp's range were masked one by one, and
// addresses were 64-bit. Here the scale dtype is a template parameter (bf16/f16; f32 scales take
// the other kernels), a warp's K range is a whole number of stages (U groups of 128 bytes per
// row), so nothing is masked, a stage's 4 scales (or 2) of a row come in one 8-byte (4-byte)
// load, and the per-stage offsets are 32-bit. The arithmetic is group_step's, unchanged.
#include "backend/cuda/qgemv_tc.cuh"

namespace mlxb::cuda::qmm {

namespace {

using namespace tc;

// U consecutive 16-bit values (U = 4: 8-byte aligned; U = 2: 4-byte aligned) as floats.
template <typename TS, int U>
__device__ __forceinline__ void load_u(const TS* p, float (&v)[U]) {
  if constexpr (U == 4) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(p));
    v[0] = lo16<TS>(w.x); v[1] = hi16<TS>(w.x); v[2] = lo16<TS>(w.y); v[3] = hi16<TS>(w.y);
  } else {
    const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p));
    v[0] = lo16<TS>(w); v[1] = hi16<TS>(w);
  }
}

constexpr int kFStages = 3;

template <int W>
constexpr int f_pitch() { return 128 + (W == 2 ? 32 : 64); }
template <int W>
constexpr int f_warp_bytes() { return kFStages * 16 * f_pitch<W>(); }

template <typename TX, typename TS, int W, bool kGated, Activation A>
__global__ void __launch_bounds__(kMaxWarps * 32) qgemv_tcf_kernel(Params p, int splits, int tiles_per_block) {
  constexpr int GB = 16 * W;    // bytes of one group in a row
  constexpr int U = 128 / GB;   // groups per stage
  constexpr int P = f_pitch<W>();
  __shared__ float red[kMaxWarps][128];
  extern __shared__ __align__(16) unsigned char stage_mem[];
  const TileCoord c = tile_coord(splits, tiles_per_block);
  unsigned char* stages = stage_mem + c.warp * f_warp_bytes<W>();
  const int groups = static_cast<int>(p.K / (32 * W));
  const int total = groups / U;  // stages per row
  const int st0 = static_cast<int>(static_cast<int64_t>(total) * c.split / splits);
  const int n = static_cast<int>(static_cast<int64_t>(total) * (c.split + 1) / splits) - st0;
  const int64_t row_bytes = p.K / 2;

  // Piece i of this lane: tile row (lane >> 3) + 4 i, bytes [16 (lane & 7), +16) of the stage.
  const int col = c.lane & 7;
  const unsigned char* src[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    src[i] = reinterpret_cast<const unsigned char*>(p.packed) + tile_row<kGated>(p, c.tile, (c.lane >> 3) + 4 * i) * row_bytes +
             static_cast<int64_t>(st0) * 128 + col * 16;
  const int dst0 = (c.lane >> 3) * P + col * 16;
  auto issue = [&](int s) {
    if (s < n) {
      unsigned char* d = stages + (s % kFStages) * (16 * P) + dst0;
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async16(d + i * 4 * P, src[i] + s * 128);
    }
    cp_async_commit();
  };

  const int64_t ra = tile_row<kGated>(p, c.tile, c.g), rb = tile_row<kGated>(p, c.tile, c.g + 8);
  const TX* xr = static_cast<const TX*>(p.x) + min(static_cast<int64_t>(c.g), p.M - 1) * p.K + c.t * 8 * W +
                 static_cast<int64_t>(st0) * U * 32 * W;
  const int64_t g_first = static_cast<int64_t>(st0) * U;
  const TS* sa = static_cast<const TS*>(p.scales) + ra * groups + g_first;
  const TS* ba = static_cast<const TS*>(p.biases) + ra * groups + g_first;
  const TS* sb = static_cast<const TS*>(p.scales) + rb * groups + g_first;
  const TS* bb = static_cast<const TS*>(p.biases) + rb * groups + g_first;

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < kFStages - 1; ++s) issue(s);
  for (int s = 0; s < n; ++s) {
    issue(s + kFStages - 1);  // into the slot consumed in iteration s - 1
    uint4 xv[U][W];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < W; ++j) xv[u][j] = __ldg(reinterpret_cast<const uint4*>(xr + (s * U + u) * 32 * W + 8 * j));
    float s_a[U], b_a[U], s_b[U], b_b[U];
    load_u<TS, U>(sa + s * U, s_a);
    load_u<TS, U>(ba + s * U, b_a);
    load_u<TS, U>(sb + s * U, s_b);
    load_u<TS, U>(bb + s * U, b_b);
    cp_async_wait<kFStages - 1>();
    __syncwarp();
    const unsigned char* st = stages + (s % kFStages) * (16 * P);
#pragma unroll
    for (int u = 0; u < U; ++u) {
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

template <typename TX, typename TS, int W, bool kGated, Activation A>
void launch_f(const Params& p) {
  constexpr int U = 128 / (16 * W);
  const int64_t tiles = ceil_div(p.N, kGated ? 8 : 16);
  const int64_t total = p.K / (32 * W) / U;
  const SplitPlan sp = plan_splits(tiles, total, kMaxWarps, kSplitTarget);
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(qgemv_tcf_kernel<TX, TS, W, kGated, A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kMaxWarps * f_warp_bytes<W>()));
    configured = true;
  }
  const size_t smem = static_cast<size_t>(sp.threads / 32) * f_warp_bytes<W>();
  qgemv_tcf_kernel<TX, TS, W, kGated, A><<<sp.grid, sp.threads, smem, stream()>>>(p, sp.splits, sp.tpb);
}

template <typename TX, typename TS, int W>
void launch_act(const Params& p, bool gated, Activation act) {
  if (!gated) return launch_f<TX, TS, W, false, Activation::kSiLU>(p);
  switch (act) {
    case Activation::kSiLU: return launch_f<TX, TS, W, true, Activation::kSiLU>(p);
    case Activation::kGeluExact: return launch_f<TX, TS, W, true, Activation::kGeluExact>(p);
    case Activation::kGeluTanh: return launch_f<TX, TS, W, true, Activation::kGeluTanh>(p);
  }
}

template <typename TX, typename TS>
void launch_w(const Params& p, bool gated, Activation act) {
  if (p.group_size == 64) launch_act<TX, TS, 2>(p, gated, act);
  else launch_act<TX, TS, 4>(p, gated, act);
}

}  // namespace

bool qgemv_tcf(const Params& p, DType xd, bool gated, Activation act) {
  if (p.sb_code == kF32 || (p.group_size != 64 && p.group_size != 128)) return false;
  const int W = p.group_size / 32, U = 128 / (16 * W);
  const int64_t groups = p.K / p.group_size;
  const uintptr_t align = static_cast<uintptr_t>(2 * U);
  if (groups % U != 0 || groups > INT32_MAX / 64 || reinterpret_cast<uintptr_t>(p.scales) % align != 0 ||
      reinterpret_cast<uintptr_t>(p.biases) % align != 0)
    return false;
  const bool sb_bf16 = p.sb_code == kBF16;
  if (xd == DType::BF16) {
    if (sb_bf16) launch_w<__nv_bfloat16, __nv_bfloat16>(p, gated, act);
    else launch_w<__nv_bfloat16, __half>(p, gated, act);
  } else {
    if (sb_bf16) launch_w<__half, __nv_bfloat16>(p, gated, act);
    else launch_w<__half, __half>(p, gated, act);
  }
  MLXB_CUDA_LAUNCHED(gated ? "qgated_matmul (tensor-core gemv, variant 7)" : "qmatmul (tensor-core gemv, variant 7)");
  return true;
}

}  // namespace mlxb::cuda::qmm
