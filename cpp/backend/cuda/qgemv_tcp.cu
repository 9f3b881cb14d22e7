// The one-row (M = 1, decode) tensor-core 4-bit GEMV with every operand in the cp.async pipeline
// (MLXB_QGEMV_VARIANT 8 / 9, the default for M = 1; see qmm.cuh). qgemv_tcf.cu (variant 7) was
// measured on the H200 at 1.3-2.2 TB/s: ncu on 8B gate+up showed 24 resident warps per SM
// (shared memory: padded stages plus a static reduction buffer), 10.3 cycles per issued
// instruction with a third of the stalls waiting on global loads of x and the scales (issued
// each stage right before their use), and 1.1 waves of warps for 3,584 tiles.
// Here, per stage and warp, one cp.async group carries the 16 rows' weights (2 KB), the 256
// values of x they meet (512 B) and the rows' scales and biases, so a stage's math waits on
// nothing but its group; stages are 128-byte rows without padding (a row-dependent XOR of the
// byte offset keeps the fragment reads free of bank conflicts), the split-K reduction reuses the
// warp's stage memory, and K is split until ~32 warps per SM are busy. NS stages per warp (NS - 1
// in flight): 2 gives 32 resident warps per SM, 3 gives 24. The arithmetic is group_step's.
// Launched programmatically (see programmatic()): its first weights and scales are requested
// before it waits for the kernel before.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/qgemv_tc.cuh"

namespace mlxb::cuda::qmm {

namespace {

using namespace tc;

// U 16-bit values from shared memory (U = 4: 8 bytes; U = 2: 4 bytes), packed two per word.
template <int U>
__device__ __forceinline__ void lds_u(const unsigned char* p, uint32_t (&v)[U / 2]) {
  if constexpr (U == 4) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    v[0] = w.x; v[1] = w.y;
  } else {
    v[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// Value u (compile-time after unrolling) of packed 16-bit values as a float.
template <typename TS, int N>
__device__ __forceinline__ float half16(const uint32_t (&v)[N], int u) {
  return (u & 1) ? hi16<TS>(v[u >> 1]) : lo16<TS>(v[u >> 1]);
}

// cp.async of BYTES to a shared address: .cg (L2 only) for streamed weights, .ca for x and the
// scales (x is read by every warp).
template <int BYTES, bool kStream>
__device__ __forceinline__ void cp_async_sh(unsigned dst, const void* src) {
  if constexpr (kStream) asm volatile("cp.async.cg.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(BYTES) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(BYTES) : "memory");
}

// One stage of one warp in shared memory: 16 weight rows of 128 bytes, the 256 x values (512
// bytes), 16 rows x U scales, 16 rows x U biases (16-bit each).
constexpr int kWBytes = 16 * 128;
constexpr int kXOff = kWBytes;
constexpr int kSOff = kXOff + 512;
template <int W>
constexpr int stage_bytes() { return kSOff + 2 * 16 * 2 * (128 / (16 * W)); }

// Byte offset within a 128-byte stage row after the bank swizzle: 8-byte fragment reads (W = 2)
// of rows g = 0..3 land on distinct banks when bits 5-6 are flipped by (row & 3); 16-byte reads
// (W = 4) of rows g = 0..1 when bit 6 is flipped by (row & 1). 16-byte pieces stay contiguous.
template <int W>
__device__ __forceinline__ int swz(int row, int byte) { return W == 2 ? byte ^ ((row & 3) << 5) : byte ^ ((row & 1) << 6); }

constexpr int kPMaxWarps = 16;
constexpr int kPWarpsPerSm = 32;  // resident warps per SM at 64 registers (K is split to fill them)

// The split-K reduction of tile_epilogue with each warp's partial sums at the start of its own
// stage memory (warp stride `stride` floats).
template <typename TX, bool kGated, Activation A>
__device__ __forceinline__ void epilogue(const Params& p, const TileCoord& c, int splits, const float (&acc)[4], float* red, int stride) {
  float* mine = red + c.warp * stride;
  store_partials(mine, c, acc);
  __syncthreads();
  if (c.split != 0) return;
  const float* part = red + c.local_tile * splits * stride;
  TX* y = static_cast<TX*>(p.y);
  const int64_t n_out = p.N;
  // M = 1: column 0 of the tile only (lanes 0..15 hold rows 0..15).
  const int r = c.lane & 15;
  if (c.lane >= 16) return;
  const int e = r * 8;
  if constexpr (kGated) {
    if (r >= 8) return;
    const int64_t n = c.tile * 8 + r;
    if (n >= n_out) return;
    float gs = 0.0f, us = 0.0f;
    for (int s = 0; s < splits; ++s) {
      gs += part[s * stride + e];
      us += part[s * stride + 64 + e];
    }
    if (p.bias) {
      gs += load_f(p.bias, p.bias_code, n);
      us += load_f(p.bias, p.bias_code, n_out + n);
    }
    const float gr = to_f32(from_f32<TX>(gs)), ur = to_f32(from_f32<TX>(us));
    y[n] = from_f32<TX>(activate<A>(gr) * ur);
  } else {
    const int64_t n = c.tile * 16 + r;
    if (n >= n_out) return;
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += part[s * stride + e];
    if (p.bias) v += load_f(p.bias, p.bias_code, n);
    y[n] = p.add ? from_f32<TX>(to_f32(y[n]) + to_f32(from_f32<TX>(v))) : from_f32<TX>(v);  // add: as qmatmul, then add
  }
}

template <typename TX, typename TS, int W, bool kGated, Activation A, int NS, bool kPair, bool kPdl, bool kNorm>
__global__ void __launch_bounds__(kPMaxWarps * 32, 2) qgemv_tcp_kernel(Params p, int splits, int tiles_per_block) {
  constexpr int GB = 16 * W;   // bytes of one group in a row
  constexpr int U = 128 / GB;  // groups per stage
  constexpr int SB = stage_bytes<W>();
  constexpr int kScBytes = 16 * 2 * U;  // one stage's scales (or biases) of the 16 rows
  extern __shared__ __align__(16) unsigned char stage_mem[];
  const TileCoord c = tile_coord(splits, tiles_per_block);
  unsigned char* stages = stage_mem + c.warp * (NS * SB);
  const int groups = static_cast<int>(p.K / (32 * W));
  const int total = groups / U;  // stages per row
  const int st0 = static_cast<int>(static_cast<int64_t>(total) * c.split / splits);
  const int n = static_cast<int>(static_cast<int64_t>(total) * (c.split + 1) / splits) - st0;
  const int64_t row_bytes = p.K / 2;

  // This lane's copies per stage: weight pieces i = 0..3 (tile row (lane >> 3) + 4 i, bytes
  // [16 (lane & 7), +16)), x bytes [16 lane, +16), and the scales (lanes 0-15) or biases
  // (lanes 16-31) of tile row lane & 15. Source offsets are 32-bit (qgemv_tcp checks the sizes),
  // the bases stay in the parameter space.
  const int col = c.lane & 7;
  uint32_t woff[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    woff[i] = static_cast<uint32_t>(tile_row<kGated>(p, c.tile, (c.lane >> 3) + 4 * i) * row_bytes) + st0 * 128u + col * 16u;
  const uint32_t xoff = st0 * 512u + c.lane * 16u;
  const int sr = c.lane & 15;
  const uint32_t soff = static_cast<uint32_t>((tile_row<kGated>(p, c.tile, sr) * groups + static_cast<int64_t>(st0) * U) * 2);
  const unsigned sh = static_cast<unsigned>(__cvta_generic_to_shared(stages));
  const unsigned wdst = sh + (c.lane >> 3) * 128 + swz<W>(c.lane >> 3, col * 16);  // + i * 512: rows + 4 keep the swizzle
  const unsigned xdst = sh + kXOff + c.lane * 16;
  const unsigned sdst = sh + kSOff + (c.lane >> 4) * kScBytes + sr * 2 * U;
  auto issue = [&](int s) {
    if (s < n) {
      const unsigned slot = (s % NS) * SB;
      const unsigned char* wbase = reinterpret_cast<const unsigned char*>(p.packed) + s * 128u;
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async_sh<16, true>(wdst + slot + i * 512, wbase + woff[i]);
      if constexpr (!kNorm) cp_async_sh<16, false>(xdst + slot, reinterpret_cast<const unsigned char*>(p.x) + xoff + s * 512u);
      const void* sb = c.lane < 16 ? p.scales : p.biases;
      cp_async_sh<2 * U, false>(sdst + slot, reinterpret_cast<const unsigned char*>(sb) + soff + s * 2u * U);
    }
    cp_async_commit();
  };

  // Fragment reads of rows g and g + 8 (same swizzle), x values [t 8W, +8W) of each group.
  const int ra_off = c.g * 128, rb_off = (c.g + 8) * 128;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kPdl) {
    // Launched programmatically (see programmatic()): this kernel may start while the one
    // before it runs, so the first stages' weights and scales (constant) are requested before
    // waiting for it, and x (its output) after. Group 0 holds the weights and scales of stages
    // 0..NS-2 and x of stage 0; group s, x of stage s: every stage is complete when its group is.
    grid_dependents_may_launch();
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) {
      if (s < n) {
        const unsigned slot = (s % NS) * SB;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          cp_async_sh<16, true>(wdst + slot + i * 512, reinterpret_cast<const unsigned char*>(p.packed) + s * 128u + woff[i]);
        cp_async_sh<2 * U, false>(sdst + slot, reinterpret_cast<const unsigned char*>(c.lane < 16 ? p.scales : p.biases) + soff + s * 2u * U);
      }
    }
    grid_dependency_wait();
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) {
      if (!kNorm && s < n) cp_async_sh<16, false>(xdst + (s % NS) * SB, reinterpret_cast<const unsigned char*>(p.x) + xoff + s * 512u);
      cp_async_commit();
    }
  } else {
    grid_dependents_may_launch();  // a programmatically launched successor (rms_norm, rope_kv_write) may start
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(s);
  }
  // kNorm: the normalised, paired row after every warp's stage memory (x is read from there).
  const unsigned char* xrow = stage_mem + (blockDim.x >> 5) * (NS * SB) + st0 * 512;
  if constexpr (kNorm) stage_paired_x<TX, true>(p, reinterpret_cast<uint4*>(stage_mem + (blockDim.x >> 5) * (NS * SB)));
  for (int s = 0; s < n; ++s) {
    issue(s + NS - 1);  // into the slot consumed in iteration s - 1
    cp_async_wait<NS - 1>();
    __syncwarp();
    const unsigned char* st = stages + (s % NS) * SB;
    const unsigned char* xb = kNorm ? xrow + s * 512 : st + kXOff;
    if constexpr (kPair && !kNorm) {  // each lane pairs the 8 x values it copied, once for all lanes
      uint4* xs = reinterpret_cast<uint4*>(stages + (s % NS) * SB + kXOff) + c.lane;
      *xs = pair_x8(*xs);
      __syncwarp();
    }
    // The rows' U scales and biases, packed (converted per group to keep registers free).
    uint32_t s_a[U / 2], b_a[U / 2], s_b[U / 2], b_b[U / 2];
    lds_u<U>(st + kSOff + c.g * 2 * U, s_a);
    lds_u<U>(st + kSOff + (c.g + 8) * 2 * U, s_b);
    lds_u<U>(st + kSOff + kScBytes + c.g * 2 * U, b_a);
    lds_u<U>(st + kSOff + kScBytes + (c.g + 8) * 2 * U, b_b);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 xv[W];
#pragma unroll
      for (int j = 0; j < W; ++j) xv[j] = *reinterpret_cast<const uint4*>(xb + (u * 32 * W + c.t * 8 * W) * 2 + 16 * j);
      uint32_t wa[W], wb[W];
      const int off = swz<W>(c.g, u * GB + c.t * 4 * W);
      if constexpr (W == 4) {
        const uint4 va = *reinterpret_cast<const uint4*>(st + ra_off + off);
        const uint4 vb = *reinterpret_cast<const uint4*>(st + rb_off + off);
        wa[0] = va.x; wa[1] = va.y; wa[2] = va.z; wa[3] = va.w;
        wb[0] = vb.x; wb[1] = vb.y; wb[2] = vb.z; wb[3] = vb.w;
      } else {
        const uint2 va = *reinterpret_cast<const uint2*>(st + ra_off + off);
        const uint2 vb = *reinterpret_cast<const uint2*>(st + rb_off + off);
        wa[0] = va.x; wa[1] = va.y;
        wb[0] = vb.x; wb[1] = vb.y;
      }
      group_step<TX, W, kPair>(wa, wb, xv, half16<TS>(s_a, u), half16<TS>(b_a, u), half16<TS>(s_b, u), half16<TS>(b_b, u), acc);
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  __syncwarp();
  epilogue<TX, kGated, A>(p, c, splits, acc, reinterpret_cast<float*>(stage_mem), NS * SB / 4);
}

template <typename TX, typename TS, int W, bool kGated, Activation A, int NS, bool kPair, bool kPdl, bool kNorm>
void launch_p(const Params& p, int64_t target) {
  constexpr int U = 128 / (16 * W);
  constexpr int kWarpBytes = NS * stage_bytes<W>();
  const int64_t tiles = ceil_div(p.N, kGated ? 8 : 16);
  const int64_t total = p.K / (32 * W) / U;
  const SplitPlan sp = plan_splits(tiles, total, kPMaxWarps, target);
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(qgemv_tcp_kernel<TX, TS, W, kGated, A, NS, kPair, kPdl, kNorm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kPMaxWarps * kWarpBytes + (kNorm ? 2 * kTcpMaxNormK : 0)));
    configured = true;
  }
  const size_t smem = static_cast<size_t>(sp.threads / 32) * kWarpBytes + (kNorm ? static_cast<size_t>(p.K) * 2 : 0);
  if constexpr (kPdl) {
    launch_kernel(qgemv_tcp_kernel<TX, TS, W, kGated, A, NS, kPair, kPdl, kNorm>, dim3(sp.grid), dim3(static_cast<unsigned>(sp.threads)),
                  smem, true, p, sp.splits, sp.tpb);
  } else {
    qgemv_tcp_kernel<TX, TS, W, kGated, A, NS, kPair, kPdl, kNorm><<<sp.grid, sp.threads, smem, stream()>>>(p, sp.splits, sp.tpb);
  }
}

template <typename TX, typename TS, int W, int NS, bool kPair, bool kPdl, bool kNorm>
void launch_act(const Params& p, bool gated, Activation act, int64_t t) {
  if (!gated) return launch_p<TX, TS, W, false, Activation::kSiLU, NS, kPair, kPdl, kNorm>(p, t);
  switch (act) {
    case Activation::kSiLU: return launch_p<TX, TS, W, true, Activation::kSiLU, NS, kPair, kPdl, kNorm>(p, t);
    case Activation::kGeluExact: return launch_p<TX, TS, W, true, Activation::kGeluExact, NS, kPair, kPdl, kNorm>(p, t);
    case Activation::kGeluTanh: return launch_p<TX, TS, W, true, Activation::kGeluTanh, NS, kPair, kPdl, kNorm>(p, t);
  }
}

template <typename TX, typename TS, int NS, bool kPair, bool kPdl, bool kNorm>
void launch_w(const Params& p, bool gated, Activation act, int64_t t) {
  if (p.group_size == 64) launch_act<TX, TS, 2, NS, kPair, kPdl, kNorm>(p, gated, act, t);
  else launch_act<TX, TS, 4, NS, kPair, kPdl, kNorm>(p, gated, act, t);
}

template <int NS, bool kPair, bool kPdl, bool kNorm = false>
void launch_ns(const Params& p, DType xd, bool gated, Activation act, int64_t t) {
  const bool sb_bf16 = p.sb_code == kBF16;
  if (xd == DType::BF16) {
    if (sb_bf16) launch_w<__nv_bfloat16, __nv_bfloat16, NS, kPair, kPdl, kNorm>(p, gated, act, t);
    else launch_w<__nv_bfloat16, __half, NS, kPair, kPdl, kNorm>(p, gated, act, t);
  } else {
    if (sb_bf16) launch_w<__half, __nv_bfloat16, NS, kPair, kPdl, kNorm>(p, gated, act, t);
    else launch_w<__half, __half, NS, kPair, kPdl, kNorm>(p, gated, act, t);
  }
}

// Programmatic launch of the default configuration where programmatic launches are on
// (backend.cu: Hopper, MLXB_CUDA_PDL not 0): by default for every K, MLXB_QGEMV_PDL=4096 only for
// K >= 4096 (the earlier default), =0 never (read once). Measured on the H200, bench.mjs decode,
// two runs each, random-weight checkpoints quantized 4-bit g64: first (scripts/cuda/qpdl-device.sh,
// the kernels around the GEMVs then launched in stream order) 8B 383 / 389 -> 413 / 409 tok/s
// with K >= 4096, 1B 1,414 / 1,434 -> 1,331 / 1,419 with every K; after rms_norm, rope_kv_write
// and decode attention were launched programmatically too (scripts/cuda/qdecode-ab-device.sh)
// 1B 1,511 / 1,450 (K >= 4096) -> 1,714 / 1,622 tok/s (every K), 8B level (451 / 447 vs 442 /
// 444: its K are all >= 4096). Greedy tokens equal with and without it, recorded and eager.
bool programmatic(int64_t k) {
  static const int mode = [] {
    const char* v = std::getenv("MLXB_QGEMV_PDL");
    const int m = !v || std::strcmp(v, "1") == 0 ? 1 : std::strcmp(v, "4096") == 0 ? 2 : 0;
    return programmatic_launch() ? m : 0;
  }();
  return mode == 1 || (mode == 2 && k >= 4096);
}

}  // namespace

bool qgemv_tcp(const Params& p, DType xd, bool gated, Activation act, int stages, bool fewer_splits, bool pair_x) {
  if (p.M != 1 || p.sb_code == kF32 || (p.group_size != 64 && p.group_size != 128)) return false;
  const int W = p.group_size / 32, U = 128 / (16 * W);
  const int64_t groups = p.K / p.group_size;
  const uintptr_t align = static_cast<uintptr_t>(2 * U);
  const int64_t rows = gated ? 2 * p.N : p.N;
  if (groups % U != 0 || groups > INT32_MAX / 64 || rows * (p.K / 2) > UINT32_MAX || rows * groups * 2 > UINT32_MAX || reinterpret_cast<uintptr_t>(p.scales) % align != 0 ||
      reinterpret_cast<uintptr_t>(p.biases) % align != 0)
    return false;
  const bool norm = p.norm_w != nullptr;
  if (norm && (stages != 2 || !pair_x || p.K > kTcpMaxNormK || reinterpret_cast<uintptr_t>(p.norm_w) % 16 != 0)) return false;
  if (p.add && gated) return false;
  const int64_t target = static_cast<int64_t>(sm_count()) * (fewer_splits ? kPWarpsPerSm / 2 : kPWarpsPerSm);
  if (stages == 3) launch_ns<3, true, false>(p, xd, gated, act, target);
  else if (!pair_x) launch_ns<2, false, false>(p, xd, gated, act, target);
  else if (programmatic(p.K)) norm ? launch_ns<2, true, true, true>(p, xd, gated, act, target) : launch_ns<2, true, true>(p, xd, gated, act, target);
  else norm ? launch_ns<2, true, false, true>(p, xd, gated, act, target) : launch_ns<2, true, false>(p, xd, gated, act, target);
  MLXB_CUDA_LAUNCHED(gated ? "qgated_matmul (tensor-core gemv, M = 1)" : "qmatmul (tensor-core gemv, M = 1)");
  return true;
}

}  // namespace mlxb::cuda::qmm
