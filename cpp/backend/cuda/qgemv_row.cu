// The one-row (M = 1, decode) 4-bit GEMV that reads each weight row in long contiguous runs straight
// into registers (group size 64 or 128, 16-bit scales, bf16 / f16 x, K a multiple of 256 groups'
// worth up to 16384). qgemv_tcp.cu stages 16-row tiles through shared memory; the stream probe
// (scripts/cuda/NOTES.md, stop 22) found that 16-row tile loads stream well only with ~512 bytes of
// every row in flight, while one-row loads of 16 bytes per lane reach ~31 GB/s per SM with 8 warps.
//
// The arithmetic is group_step's (qgemv_tc.cuh: nibbles -> 16-bit floats by one lop3, mma.sync
// m16n8k16 with float32 accumulation, scale and bias per group), but the fragment rows mean
// something else. A warp reads 256 contiguous bytes of one weight row per instruction (lane l: 8
// bytes at 8 l for group size 64, 16 bytes at 16 l for 128), so the 4 lanes of fragment row g
// (g = lane / 4) hold exactly one group: group g of that "piece" of the row. Fragment rows g and
// g + 8 are two weight rows R0 and R1 over the same piece, and lane (g, t) supplies column g of B
// with the x values of its own k range. Then C[g][g] is R0's dot product over group g and
// C[g + 8][g] R1's (the other columns multiply group g's weights by other groups' x and are
// dropped); they sit in lane (g, g / 2), element g & 1 (and 2 + (g & 1)), whose scale and bias are
// group g's, as group_step applies them. x thus lives in registers as the mma reads it, paired
// once per block in shared memory, and each weight row is streamed whole and in order.
//
// Work: a unit is 4 weight rows (two fragment pairs; gated: the gate and up rows of 2 outputs)
// over K split into `splits` runs of at most kD pieces; a warp takes one (unit, split), issues all
// of its weight, scale and bias loads at once (2 KB of weights), waits for the kernel before it
// (programmatic launch), then computes. The 8 diagonal sums of each row meet by shuffles (fixed
// order), the splits of a unit in shared memory (split order), and the output is written as
// qgemv_tcp writes it (bias, + residual, or act(gate) * up).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/qgemv_row.h"
#include "backend/cuda/qgemv_tc.cuh"
#include "backend/cuda/rms_row.cuh"

namespace mlxb::cuda::qmm {

namespace {

using namespace tc;

constexpr int kRows = 4;            // weight rows per unit
constexpr int kMaxBlockWarps = 8;
constexpr int64_t kRowMaxK = 16384;  // x staged whole per block: 32 KB

std::atomic<int64_t> launches{0};

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_QGEMV_ROW");
    return v && v[0] == '1';
  }();
  return on;
}

bool pdl() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_QGEMV_PDL");
    return programmatic_launch() && !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// The W words (4 W bytes) of one lane at a piece of a row.
template <int W>
__device__ __forceinline__ void load_piece(const unsigned char* p, uint32_t (&w)[W]) {
  if constexpr (W == 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x; w[1] = v.y;
  }
}

// Where a warp's task reads: its 4 rows' weight words, scales and biases from piece p0 on.
template <int W, bool kGated>
struct Task {
  const unsigned char* w[kRows];
  const unsigned short* s[kRows];
  const unsigned short* b[kRows];
  __device__ __forceinline__ Task(const Params& p, int64_t unit, int p0, int lane) {
    const int64_t groups = p.K / (32 * W);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      int64_t r0, r1;  // pair q: fragment rows g and g + 8
      if constexpr (kGated) {
        r0 = min(unit * 2 + q, p.N - 1);
        r1 = p.N + r0;
      } else {
        r0 = min(unit * 4 + 2 * q, p.N - 1);
        r1 = min(unit * 4 + 2 * q + 1, p.N - 1);
      }
      const int64_t rr[2] = {r0, r1};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w[2 * q + h] = reinterpret_cast<const unsigned char*>(p.packed) + rr[h] * (p.K / 2) + static_cast<int64_t>(p0) * (128 * W) + lane * (4 * W);
        s[2 * q + h] = static_cast<const unsigned short*>(p.scales) + rr[h] * groups + p0 * 8 + (lane >> 2);
        b[2 * q + h] = static_cast<const unsigned short*>(p.biases) + rr[h] * groups + p0 * 8 + (lane >> 2);
      }
    }
  }
};

// Persistent blocks: block b takes unit groups b, b + gridDim.x, ... (units_per_block units of
// `splits` warps each). Piece i of the next unit group is requested as soon as piece i of the
// current one has been multiplied (into the same registers), so every warp keeps up to kD pieces
// in flight across its unit groups.
template <typename TX, typename TS, int W, bool kGated, Activation A, bool kNorm>
__global__ void __launch_bounds__(kMaxBlockWarps * 32, 2) qgemv_row_kernel(Params p, int splits, int units_per_block, int64_t units) {
  constexpr int kD = 8 / W;        // pieces per warp at most (4 KB of weights)
  constexpr int kPieceK = 256 * W; // values of K per piece (8 groups)
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* xs = reinterpret_cast<uint4*>(smem);
  float* red = reinterpret_cast<float*>(smem + p.K * 2);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int local_unit = warp / splits, split = warp % splits;
  const int64_t unit_groups = (units + units_per_block - 1) / units_per_block;
  const int pieces = static_cast<int>(p.K / kPieceK);
  const int p0 = pieces * split / splits;
  const int n = pieces * (split + 1) / splits - p0;
  // The unit of unit group ug (past the end: the last unit, computed, not written).
  auto unit_of = [&](int64_t ug) { return min(ug * units_per_block + local_unit, units - 1); };

  uint32_t wv[kD][kRows][W];
  uint32_t sv[kD][kRows], bv[kD][kRows];
  auto request = [&](const Task<W, kGated>& tk, int i) {
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      load_piece<W>(tk.w[k] + i * (128 * W), wv[i][k]);
      sv[i][k] = __ldg(tk.s[k] + i * 8);
      bv[i][k] = __ldg(tk.b[k] + i * 8);
    }
  };

  grid_dependents_may_launch();
  // The first unit group's weights, scales and biases in flight before anything waits.
  {
    const Task<W, kGated> first(p, unit_of(blockIdx.x), p0, lane);
#pragma unroll
    for (int i = 0; i < kD; ++i)
      if (i < n) request(first, i);
  }
  grid_dependency_wait();  // x is the kernel before's output

  // x paired (pair_x8) into shared memory, laid out so that the lanes' reads of word j of a piece
  // are consecutive 16-byte slots: piece pc, word j, lane l at pc * 32 W + j * 32 + l.
  // kNorm: x normalised first, as rms_norm would (rms_row.cuh), so the result equals rms_norm then
  // this GEMV bit for bit.
  {
    const uint4* xv = static_cast<const uint4*>(p.x);
    float inv = 0.0f;
    if constexpr (kNorm) {
      const TX* xe = static_cast<const TX*>(p.x);
      inv = rms_inv_row([&](int64_t i) { return to_f32(xe[i]); }, p.K, p.eps);
    }
    const uint4* nv = static_cast<const uint4*>(p.norm_w);
    for (int i = threadIdx.x; i < static_cast<int>(p.K / 8); i += blockDim.x) {
      const int pc = i / (32 * W), rem = i % (32 * W);
      xs[pc * 32 * W + (rem % W) * 32 + rem / W] = pair_x8(kNorm ? rms_scale8<TX>(xv[i], __ldg(nv + i), inv, p.add_one) : xv[i]);
    }
  }
  __syncthreads();

  TX* y = static_cast<TX*>(p.y);
  for (int64_t ug = blockIdx.x; ug < unit_groups; ug += gridDim.x) {
    const int64_t next = ug + gridDim.x;
    const Task<W, kGated> after(p, unit_of(next < unit_groups ? next : ug), p0, lane);
    float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kD; ++i) {
      if (i < n) {
        uint4 x[W];
#pragma unroll
        for (int j = 0; j < W; ++j) x[j] = xs[(p0 + i) * 32 * W + j * 32 + lane];
        group_step<TX, W, true>(wv[i][0], wv[i][1], x, lo16<TS>(sv[i][0]), lo16<TS>(bv[i][0]), lo16<TS>(sv[i][1]), lo16<TS>(bv[i][1]), acc0);
        group_step<TX, W, true>(wv[i][2], wv[i][3], x, lo16<TS>(sv[i][2]), lo16<TS>(bv[i][2]), lo16<TS>(sv[i][3]), lo16<TS>(bv[i][3]), acc1);
        if (next < unit_groups) request(after, i);
      }
    }

    // The diagonal: lane (g, g / 2) holds the sums of rows r[0..3] over group g, element g & 1 of
    // each pair's row. Each lane (g, t) fetches value t of its fragment row's diagonal lane, then
    // the 8 groups are added across g (xor 4, 8, 16): lanes 0..3 end with rows r[0..3].
    const bool diag = t == (g >> 1);
    const int e = g & 1;
    const float v[4] = {diag ? acc0[e] : 0.0f, diag ? acc0[2 + e] : 0.0f, diag ? acc1[e] : 0.0f, diag ? acc1[2 + e] : 0.0f};
    const int src = 4 * g + (g >> 1);
    float m = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float u = __shfl_sync(0xffffffffu, v[q], src);
      if (t == q) m = u;
    }
    m += __shfl_xor_sync(0xffffffffu, m, 4);
    m += __shfl_xor_sync(0xffffffffu, m, 8);
    m += __shfl_xor_sync(0xffffffffu, m, 16);
    if (lane < kRows) red[warp * kRows + lane] = m;
    __syncthreads();
    const int64_t unit = ug * units_per_block + local_unit;
    const float* part = red + local_unit * splits * kRows;
    if (split == 0 && unit < units) {
      if constexpr (kGated) {
        const int64_t o = unit * 2 + lane;
        if (lane < 2 && o < p.N) {
          float gs = 0.0f, us = 0.0f;
          for (int s = 0; s < splits; ++s) {
            gs += part[s * kRows + 2 * lane];
            us += part[s * kRows + 2 * lane + 1];
          }
          if (p.bias) {
            gs += load_f(p.bias, p.bias_code, o);
            us += load_f(p.bias, p.bias_code, p.N + o);
          }
          const float gr = to_f32(from_f32<TX>(gs)), ur = to_f32(from_f32<TX>(us));
          y[o] = from_f32<TX>(activate<A>(gr) * ur);
        }
      } else {
        const int64_t o = unit * 4 + lane;
        if (lane < kRows && o < p.N) {
          float s = 0.0f;
          for (int k = 0; k < splits; ++k) s += part[k * kRows + lane];
          if (p.bias) s += load_f(p.bias, p.bias_code, o);
          y[o] = p.add ? from_f32<TX>(to_f32(y[o]) + to_f32(from_f32<TX>(s))) : from_f32<TX>(s);  // add: as qmatmul, then add
        }
      }
    }
    __syncthreads();  // red is written again by the next unit group
  }
}

struct Plan {
  int splits = 1, units_per_block = 1;
  int64_t units = 0;
  unsigned grid = 0, threads = 0;
  size_t smem = 0;
};

// K in the fewest runs of at most kD pieces (splits), or 2 or 4 times as many runs (while a unit's
// runs fit a block of 8 warps), whichever gives the persistent grid (two blocks per SM, the
// residency the launch bounds allow) the least work on its busiest warp: unit-group rounds times
// pieces per run; ties go to the fewer runs (more pieces in flight per warp).
Plan plan_for(const Params& p, bool gated, int W) {
  Plan pl;
  const int kd = 8 / W;
  const int pieces = static_cast<int>(p.K / (256 * W));
  pl.units = ceil_div(p.N, gated ? 2 : kRows);
  const int64_t slots = 2 * static_cast<int64_t>(sm_count());
  int64_t best = INT64_MAX;
  for (int s = static_cast<int>(ceil_div(pieces, kd)); s <= kMaxBlockWarps && s <= pieces; s *= 2) {
    const int ub = kMaxBlockWarps / s;
    const int64_t groups = ceil_div(pl.units, ub);
    const int64_t cost = ceil_div(groups, std::min(groups, slots)) * ceil_div(pieces, s);
    if (cost < best) {
      best = cost;
      pl.splits = s;
      pl.units_per_block = ub;
      pl.grid = static_cast<unsigned>(std::min(groups, slots));
    }
  }
  pl.threads = static_cast<unsigned>(32 * pl.splits * pl.units_per_block);
  pl.smem = static_cast<size_t>(p.K) * 2 + static_cast<size_t>(pl.threads / 32) * kRows * sizeof(float);
  return pl;
}

template <typename TX, typename TS, int W, bool kGated, Activation A>
void launch(const Params& p) {
  const Plan pl = plan_for(p, kGated, W);
  if (p.norm_w)
    launch_kernel(qgemv_row_kernel<TX, TS, W, kGated, A, true>, dim3(pl.grid), dim3(pl.threads), pl.smem, pdl(), p, pl.splits,
                  pl.units_per_block, pl.units);
  else
    launch_kernel(qgemv_row_kernel<TX, TS, W, kGated, A, false>, dim3(pl.grid), dim3(pl.threads), pl.smem, pdl(), p, pl.splits,
                  pl.units_per_block, pl.units);
}

template <typename TX, typename TS, int W>
void launch_act(const Params& p, bool gated, Activation act) {
  if (!gated) return launch<TX, TS, W, false, Activation::kSiLU>(p);
  switch (act) {
    case Activation::kSiLU: return launch<TX, TS, W, true, Activation::kSiLU>(p);
    case Activation::kGeluExact: return launch<TX, TS, W, true, Activation::kGeluExact>(p);
    case Activation::kGeluTanh: return launch<TX, TS, W, true, Activation::kGeluTanh>(p);
  }
}

template <typename TX, typename TS>
void launch_w(const Params& p, bool gated, Activation act) {
  if (p.group_size == 64) launch_act<TX, TS, 2>(p, gated, act);
  else launch_act<TX, TS, 4>(p, gated, act);
}

}  // namespace

int64_t qgemv_row_launches() { return launches.load(std::memory_order_relaxed); }
bool qgemv_row_enabled() { return enabled(); }

bool qgemv_row(const Params& p, DType xd, bool gated, Activation act, bool forced) {
  if (!forced && !enabled()) return false;
  if (p.M != 1 || (p.add && gated) || (p.sb_code != kBF16 && p.sb_code != kF16)) return false;
  if (p.norm_w && reinterpret_cast<uintptr_t>(p.norm_w) % 16 != 0) return false;
  if ((xd != DType::BF16 && xd != DType::F16) || (p.group_size != 64 && p.group_size != 128)) return false;
  const int W = p.group_size / 32;
  if (p.K % (256 * W) != 0 || p.K > kRowMaxK || p.N < 1) return false;
  const int64_t rows = gated ? 2 * p.N : p.N;
  if (rows > INT32_MAX || reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.packed) % 16 != 0) return false;
  const bool sb_bf16 = p.sb_code == kBF16;
  if (xd == DType::BF16) sb_bf16 ? launch_w<__nv_bfloat16, __nv_bfloat16>(p, gated, act) : launch_w<__nv_bfloat16, __half>(p, gated, act);
  else sb_bf16 ? launch_w<__half, __nv_bfloat16>(p, gated, act) : launch_w<__half, __half>(p, gated, act);
  launches.fetch_add(1, std::memory_order_relaxed);
  MLXB_CUDA_LAUNCHED(gated ? "qgated_matmul (row gemv, M = 1)" : "qmatmul (row gemv, M = 1)");
  return true;
}

}  // namespace mlxb::cuda::qmm
