// The one-row (M = 1, decode) 4-bit GEMV with its weights, scales and biases streamed by 2-D tensor
// copies (TMA), sm_90+, group size 64, 16-bit scales, bf16 / f16 x. qgemv_tcp.cu moves the same
// bytes with 16-byte cp.async pieces, and stream_probe.cu measured why that form tops out: on the
// H200, 8-row x 64-byte cp.async pieces stream ~13 GB/s per SM where one block issuing 2-D boxes
// streams ~30 (scripts/cuda/NOTES.md). The arithmetic is group_step's (qgemv_tc.cuh).
//
// Work: tiles of 16 weight rows (gated: 8 gate rows and the matching 8 up rows) over the whole of
// K. One persistent block per SM takes a contiguous run of tiles (at most one tile more than
// another block, so no split-K and no cross-block reduction); its ring of kStages stages runs on
// across its tiles. A stage is 1024 values of K: four 16-row x 128-byte boxes of packed words
// (128-byte swizzle) and one 16-row x 32-byte box each of scales and biases (K a multiple of 512:
// the half of a last stage past K is not copied, its scales and biases are the copies' zero fill,
// and x is zero there too). One producer warp
// (one thread) issues the boxes; 8 consumer warps split each stage, warp w reading box w / 2 and
// its groups 2 (w & 1), +1. At a tile's end the 8 partial sums meet in shared memory and warp 0
// adds them in warp order and writes the outputs (plain, + residual, or act(gate) * up).
//
// Fragment row g of a warp stands for tile row rho(g) = ((g & 3) << 1) | (g >> 2) (and g + 8 for
// 8 + rho(g)): the swizzle puts 16-byte chunk c of box row r at c ^ (r & 7), and with rho the four
// rows a half-warp reads (8-byte reads) fall on distinct banks.
//
// Launched programmatically: the first kStages stages of weights are requested before the kernel
// waits for the one before it; x (its output) is read after, once per block, into shared memory
// (normalised there with p.norm_w, as rms_norm would).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/qgemv_tc.cuh"
#include "backend/cuda/qgemv_tma.h"
#include "backend/cuda/tma.cuh"

namespace mlxb::cuda::qmm {

namespace {

using namespace tc;

constexpr int kConsumers = 8, kThreads = 32 * (kConsumers + 1);
constexpr int kStageK = 1024;           // values of K per stage: 16 groups of 64
constexpr int kWStage = 16 * 512;       // packed bytes of a stage: 16 rows x 512 bytes (four 2 KB boxes)
constexpr int kSBStage = 2 * 16 * 32;   // scales then biases: 16 rows x 16 values x 2 bytes each
constexpr int kStageTx = kWStage + kSBStage;
constexpr int64_t kMaxK = 16384;        // x staged whole: 32 KB

__device__ __forceinline__ int rho(int g) { return ((g & 3) << 1) | (g >> 2); }

template <int NS>
constexpr size_t smem_bytes(int64_t k) {
  return 1024 + static_cast<size_t>(NS) * (kWStage + kSBStage) + 2 * NS * sizeof(uint64_t) + 2 * kConsumers * 16 * sizeof(float) +
         static_cast<size_t>(ceil_div(k, kStageK) * kStageK) * 2;
}

struct Maps {
  CUtensorMap w, s, b;
};

// Warp 0 at a tile's end: the 8 warps' partial sums of tile row r (part[q * 16 + r]) added in warp
// order, then the output as tcp's epilogue writes it (lane r < 16; gated, lane r < 8: gate row r
// and up row 8 + r).
template <typename TX, bool kGated, Activation A>
__device__ __forceinline__ void tile_out(const Params& p, const float* part, int64_t tile, int lane) {
  TX* y = static_cast<TX*>(p.y);
  if constexpr (kGated) {
    const int64_t n = tile * 8 + lane;
    if (lane >= 8 || n >= p.N) return;
    float gs = 0.0f, us = 0.0f;
#pragma unroll
    for (int q = 0; q < kConsumers; ++q) {
      gs += part[q * 16 + lane];
      us += part[q * 16 + 8 + lane];
    }
    if (p.bias) {
      gs += load_f(p.bias, p.bias_code, n);
      us += load_f(p.bias, p.bias_code, p.N + n);
    }
    const float gr = to_f32(from_f32<TX>(gs)), ur = to_f32(from_f32<TX>(us));
    y[n] = from_f32<TX>(activate<A>(gr) * ur);
  } else {
    const int64_t n = tile * 16 + lane;
    if (lane >= 16 || n >= p.N) return;
    float v = 0.0f;
#pragma unroll
    for (int q = 0; q < kConsumers; ++q) v += part[q * 16 + lane];
    if (p.bias) v += load_f(p.bias, p.bias_code, n);
    y[n] = p.add ? from_f32<TX>(to_f32(y[n]) + to_f32(from_f32<TX>(v))) : from_f32<TX>(v);  // add: as qmatmul, then add
  }
}

template <typename TX, typename TS, bool kGated, Activation A, int NS, bool kNorm>
__global__ void __launch_bounds__(kThreads, 1) qgemv_tma_kernel(const __grid_constant__ Maps maps, Params p, int tiles) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* wring = align_1k(smem_raw);    // NS x 8 KB weight stages (1 KB aligned boxes)
  unsigned char* sbring = wring + NS * kWStage;  // NS x 1 KB scales and biases
  uint64_t* full = reinterpret_cast<uint64_t*>(sbring + NS * kSBStage);
  uint64_t* empty = full + NS;
  float* red = reinterpret_cast<float*>(empty + NS);  // [2][kConsumers][16]
  uint4* xs = reinterpret_cast<uint4*>(red + 2 * kConsumers * 16);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stages_per_tile = static_cast<int>((p.K + kStageK - 1) / kStageK);
  const int t0 = static_cast<int>(static_cast<int64_t>(tiles) * blockIdx.x / gridDim.x);
  const int t1 = static_cast<int>(static_cast<int64_t>(tiles) * (blockIdx.x + 1) / gridDim.x);
  const int n_stages = (t1 - t0) * stages_per_tile;
  const int f = static_cast<int>(p.N);  // gated: up rows start at F

  // Stage i of this block: tile t0 + i / stages_per_tile, K stage i % stages_per_tile.
  auto issue = [&](int i) {
    const int slot = i % NS, tile = t0 + i / stages_per_tile, kw = (i % stages_per_tile) * (kStageK / 8);
    unsigned char* w = wring + slot * kWStage;
    unsigned char* sb = sbring + slot * kSBStage;
    uint64_t* bar = full + slot;
    const int kg = (i % stages_per_tile) * (kStageK / 64);
    // K % 1024 == 512: the last stage's boxes 2 and 3 lie wholly past K and are not copied; their
    // slots keep stale words, which the zero-filled scales and biases there (and x = 0) cancel.
    const int boxes = (i % stages_per_tile == stages_per_tile - 1 && p.K % kStageK != 0) ? 2 : 4;
    mbar_expect(bar, static_cast<uint32_t>(kStageTx - (4 - boxes) * 2048));
    for (int kk = 0; kk < boxes; ++kk) {
      if constexpr (kGated) {
        tma_2d(w + kk * 2048, &maps.w, kw + 32 * kk, tile * 8, bar);
        tma_2d(w + kk * 2048 + 1024, &maps.w, kw + 32 * kk, f + tile * 8, bar);
      } else {
        tma_2d(w + kk * 2048, &maps.w, kw + 32 * kk, tile * 16, bar);
      }
    }
    if constexpr (kGated) {
      tma_2d(sb, &maps.s, kg, tile * 8, bar);
      tma_2d(sb + 256, &maps.s, kg, f + tile * 8, bar);
      tma_2d(sb + 512, &maps.b, kg, tile * 8, bar);
      tma_2d(sb + 768, &maps.b, kg, f + tile * 8, bar);
    } else {
      tma_2d(sb, &maps.s, kg, tile * 16, bar);
      tma_2d(sb + 512, &maps.b, kg, tile * 16, bar);
    }
  };

  const bool producer = warp == kConsumers && lane == 0;
  if (producer) {
    for (int s = 0; s < NS; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, kConsumers);
    }
    mbar_init_fence();
    for (int i = 0; i < NS && i < n_stages; ++i) issue(i);  // weights never change: before the wait
  }
  grid_dependents_may_launch();
  grid_dependency_wait();
  for (int i = static_cast<int>(p.K / 8) + threadIdx.x; i < stages_per_tile * (kStageK / 8); i += blockDim.x) xs[i] = make_uint4(0, 0, 0, 0);
  stage_paired_x<TX, kNorm>(p, xs);  // ends with a barrier: the ring's barriers are initialised too

  if (warp == kConsumers) {
    if (!producer) return;
    for (int i = NS; i < n_stages; ++i) {
      mbar_wait(empty + i % NS, static_cast<uint32_t>((i / NS - 1) & 1));
      fence_proxy_async();
      issue(i);
    }
    return;
  }

  const int g = lane >> 2, t = lane & 3, rg = rho(g);
  const int box = warp >> 1, gb = (warp & 1) * 2;  // this warp's box of a stage and its first group in it
  // Byte offsets in a weight stage of rows rho(g) and 8 + rho(g), groups gb and gb + 1 (lane t's 8 bytes).
  int woff[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = 8 * h + rg, c = 2 * (gb + j) + (t >> 1);
      woff[h][j] = box * 2048 + r * 128 + ((c ^ (r & 7)) << 4) + (t & 1) * 8;
    }
  const int soff_a = rg * 32 + (4 * box + gb) * 2, soff_b = soff_a + 8 * 32;  // two scales (groups gb, gb + 1) per row
  const unsigned char* xbytes = reinterpret_cast<const unsigned char*>(xs);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int parity = 0;
  for (int i = 0; i < n_stages; ++i) {
    const int slot = i % NS, ks = i % stages_per_tile;
    mbar_wait(full + slot, static_cast<uint32_t>((i / NS) & 1));
    __syncwarp();  // converged for mma.sync
    const unsigned char* w = wring + slot * kWStage;
    const unsigned char* sb = sbring + slot * kSBStage;
    const uint32_t s_a = *reinterpret_cast<const uint32_t*>(sb + soff_a), s_b = *reinterpret_cast<const uint32_t*>(sb + soff_b);
    const uint32_t b_a = *reinterpret_cast<const uint32_t*>(sb + 512 + soff_a), b_b = *reinterpret_cast<const uint32_t*>(sb + 512 + soff_b);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint2 va = *reinterpret_cast<const uint2*>(w + woff[0][j]);
      const uint2 vb = *reinterpret_cast<const uint2*>(w + woff[1][j]);
      const uint32_t wa[2] = {va.x, va.y}, wbv[2] = {vb.x, vb.y};
      const int k = ks * kStageK + (4 * box + gb + j) * 64 + t * 16;
      const uint4 xv[2] = {*reinterpret_cast<const uint4*>(xbytes + k * 2), *reinterpret_cast<const uint4*>(xbytes + k * 2 + 16)};
      const float sa = j ? hi16<TS>(s_a) : lo16<TS>(s_a), sbv = j ? hi16<TS>(s_b) : lo16<TS>(s_b);
      const float ba = j ? hi16<TS>(b_a) : lo16<TS>(b_a), bbv = j ? hi16<TS>(b_b) : lo16<TS>(b_b);
      group_step<TX, 2, true>(wa, wbv, xv, sa, ba, sbv, bbv, acc);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + slot);
    if (ks != stages_per_tile - 1) continue;

    // The tile's end: column 0 of each warp's fragment (lanes t = 0) into red, warp 0 adds them.
    float* mine = red + (parity * kConsumers + warp) * 16;
    if (t == 0) {
      mine[rg] = acc[0];
      mine[8 + rg] = acc[2];
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    __syncwarp();
    asm volatile("barrier.sync 1, %0;\n" ::"n"(32 * kConsumers) : "memory");  // not .aligned: lanes may arrive apart
    const float* part = red + parity * kConsumers * 16;
    parity ^= 1;
    if (warp == 0) tile_out<TX, kGated, A>(p, part, t0 + i / stages_per_tile, lane);
  }
}

// MLXB_QGEMV_TMA=1: on where it fits; unset or 0, off (qgemv_tcp runs); read once. Opt-in until
// measured on the H200 (scripts/cuda/qtma-device.sh).
// MLXB_QTMA_STAGES: 8 for a ring of 8 stages instead of 16 (read once). Timing knobs.
bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_QGEMV_TMA");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}
// MLXB_QTMA_GRID=2 (with 8 stages): two blocks per SM (read once).
int blocks_per_sm() {
  static const int b = [] {
    const char* v = std::getenv("MLXB_QTMA_GRID");
    return v && std::strcmp(v, "2") == 0 ? 2 : 1;
  }();
  return b;
}
int ring_stages() {
  static const int ns = [] {
    const char* v = std::getenv("MLXB_QTMA_STAGES");
    return v && std::strcmp(v, "8") == 0 ? 8 : 16;
  }();
  return ns;
}

std::atomic<int64_t> launches{0};

template <typename TX, typename TS, bool kGated, Activation A, int NS, bool kNorm>
void launch(const Maps& maps, const Params& p, int tiles) {
  auto* kernel = qgemv_tma_kernel<TX, TS, kGated, A, NS, kNorm>;
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes<NS>(kMaxK))));
    configured = true;
  }
  const unsigned grid = static_cast<unsigned>(std::min(tiles, sm_count() * (NS == 8 ? blocks_per_sm() : 1)));
  launch_kernel(kernel, dim3(grid), dim3(kThreads), smem_bytes<NS>(p.K), programmatic_launch(), maps, p, tiles);
}

template <typename TX, typename TS, bool kGated, int NS, bool kNorm>
void launch_act(const Maps& maps, const Params& p, Activation act, int tiles) {
  if (!kGated || act == Activation::kSiLU) return launch<TX, TS, kGated, Activation::kSiLU, NS, kNorm>(maps, p, tiles);
  if (act == Activation::kGeluExact) return launch<TX, TS, kGated, Activation::kGeluExact, NS, kNorm>(maps, p, tiles);
  launch<TX, TS, kGated, Activation::kGeluTanh, NS, kNorm>(maps, p, tiles);
}

template <typename TX, typename TS, int NS>
void launch_forms(const Maps& maps, const Params& p, bool gated, Activation act, int tiles) {
  const bool norm = p.norm_w != nullptr;
  if (gated) norm ? launch_act<TX, TS, true, NS, true>(maps, p, act, tiles) : launch_act<TX, TS, true, NS, false>(maps, p, act, tiles);
  else norm ? launch_act<TX, TS, false, NS, true>(maps, p, act, tiles) : launch_act<TX, TS, false, NS, false>(maps, p, act, tiles);
}

template <int NS>
void launch_types(const Maps& maps, const Params& p, DType xd, bool gated, Activation act, int tiles) {
  const bool sb_bf16 = p.sb_code == kBF16;
  if (xd == DType::BF16) sb_bf16 ? launch_forms<__nv_bfloat16, __nv_bfloat16, NS>(maps, p, gated, act, tiles)
                                 : launch_forms<__nv_bfloat16, __half, NS>(maps, p, gated, act, tiles);
  else sb_bf16 ? launch_forms<__half, __nv_bfloat16, NS>(maps, p, gated, act, tiles) : launch_forms<__half, __half, NS>(maps, p, gated, act, tiles);
}

}  // namespace

int64_t qgemv_tma_launches() { return launches.load(std::memory_order_relaxed); }
bool qgemv_tma_available() { return compute_major() >= 9 && enabled(); }

bool qgemv_tma(const Params& p, DType xd, bool gated, Activation act, bool forced) {
  if (!forced && !enabled()) return false;
  if (compute_major() < 9 || p.M != 1 || p.group_size != 64 || (p.sb_code != kBF16 && p.sb_code != kF16)) return false;
  if ((xd != DType::BF16 && xd != DType::F16) || p.K % (kStageK / 2) != 0 || p.K > kMaxK || (p.add && gated)) return false;
  const int64_t rows = gated ? 2 * p.N : p.N;
  if (p.N < 1 || rows > INT32_MAX / 2 || reinterpret_cast<uintptr_t>(p.x) % 16 != 0) return false;
  if (p.norm_w && reinterpret_cast<uintptr_t>(p.norm_w) % 16 != 0) return false;
  if (static_cast<int64_t>(smem_bytes<16>(kMaxK)) > max_smem_optin()) return false;
  Maps maps;
  const int box_rows = gated ? 8 : 16;
  const CUtensorMapDataType u16 = CU_TENSOR_MAP_DATA_TYPE_UINT16;
  if (!encode_tma_2d_raw(&maps.w, p.packed, CU_TENSOR_MAP_DATA_TYPE_UINT32, 4, rows, p.K / 8, p.K / 2, box_rows, 32, true) ||
      !encode_tma_2d_raw(&maps.s, p.scales, u16, 2, rows, p.K / 64, p.K / 32, box_rows, kStageK / 64, false) ||
      !encode_tma_2d_raw(&maps.b, p.biases, u16, 2, rows, p.K / 64, p.K / 32, box_rows, kStageK / 64, false))
    return false;
  const int tiles = static_cast<int>(ceil_div(p.N, gated ? 8 : 16));
  if (ring_stages() == 8) launch_types<8>(maps, p, xd, gated, act, tiles);
  else launch_types<16>(maps, p, xd, gated, act, tiles);
  launches.fetch_add(1, std::memory_order_relaxed);
  MLXB_CUDA_LAUNCHED(gated ? "qgated_matmul (TMA gemv, M = 1)" : "qmatmul (TMA gemv, M = 1)");
  return true;
}

}  // namespace mlxb::cuda::qmm
