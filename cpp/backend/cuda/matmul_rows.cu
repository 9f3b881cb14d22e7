// y[M, N] = x[M, K] · w[N, K]^T for 9..32 rows of x (the batched decode step's projections):
// 16-bit x, w and y, float32 accumulation, on the tensor cores, launched programmatically (the
// weights are requested before the kernel waits for the one that writes x; cuBLASLt's kernels
// cannot be launched so, see scripts/cuda/NOTES.md). Opt-in (MLXB_ROWS_GEMM=1), sm_90+: on the
// H200 it is still slower than cuBLASLt at the 8B serving shapes (NOTES.md, stop 19).
//
// Loads: 2-D tensor copies (TMA, 128-byte swizzle) of 64-value boxes: per stage two boxes of 64
// weight rows and one of the 32 rows of x (rows past M are zeros), completing on one mbarrier,
// a ring of kStages stages; one thread issues them (stream_probe.cu: this form streams ~30 GB/s
// per SM with one block of 4 warps, where 16-byte cp.async of short row pieces managed 13).
//
// Roles: weight rows are the mma M dimension (two 16-row tiles per warp), rows of x the N
// dimension (up to four 8-row tiles). Lane (g, t) reads, per 32-value half kc of a stage, the
// 16-byte chunk 4kc + t of a weight row and of an x row; words 0, 1 of those reads are the A and B
// fragments of one k-step and words 2, 3 of the next. A and B see one permutation of k, so the
// sums are the plain ones. Fragment row g stands for box row sigma(g) = (g >> 1) | ((g & 1) << 2)
// of its 8-row group: the swizzle puts chunk c of box row r at c ^ (r & 7), and with sigma the two
// rows a quarter-warp reads fall on opposite halves of the banks.
//
// A block is 4 warps, 128 weight rows (gated: 64 gate rows and the same 64 up rows, 64 outputs);
// K is cut into grid.y slices of whole stages (as even as possible). Slices write float32 partials
// and the last block of a row tile (sync counters) adds them in slice order, so the result does
// not depend on timing. Gated form: [gate; up] weights [2F, K], output [M, F] =
// act(round(gate)) * round(up), as matmul then gated_act.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/matmul_rows.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/tma.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kBlockRows = 128;  // weight rows per block
constexpr int kStageK = 64;      // values of K per stage (one 128-byte box row)
constexpr int kBoxRows = 64;     // weight rows per box
constexpr int kWBox = kBoxRows * kStageK * 2, kXBox = 32 * kStageK * 2;
constexpr int kStageBytes = 2 * kWBox + kXBox;  // 20 KB, a multiple of 1 KB (swizzle alignment)
constexpr int kStages = 4;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * kStageBytes + kStages * sizeof(uint64_t) + 1024;

struct RowsArgs {
  const void* bias;  // [N] in w's dtype, or null
  void* y;
  float* part;    // [slices, M, N] partials (slices > 1)
  int* counters;  // one per row tile (slices > 1)
  int m, n, k;    // n: weight rows (2F when gated)
};

template <typename T>
__device__ __forceinline__ float rounded(float v, const T* bias, int64_t n) {
  const float r = to_f32(from_f32<T>(v));
  return bias ? to_f32(from_f32<T>(r + to_f32(bias[n]))) : r;
}

__device__ __forceinline__ int sigma(int g) { return (g >> 1) | ((g & 1) << 2); }

template <typename T, int NT, bool kGated, Activation A>
__global__ void __launch_bounds__(kThreads) rows_gemm_kernel(const __grid_constant__ CUtensorMap wmap,
                                                             const __grid_constant__ CUtensorMap xmap, RowsArgs a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_1k(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3, sg = sigma(g);
  const int slices = gridDim.y, split = blockIdx.y;
  const int total = a.k / kStageK;
  const int st0 = static_cast<int>(static_cast<int64_t>(total) * split / slices);
  const int nst = static_cast<int>(static_cast<int64_t>(total) * (split + 1) / slices) - st0;
  const int f = a.n / 2;
  // Box row coordinates: non-gated, rows tile*128 and +64; gated, gate rows tile*64 and up rows F + tile*64.
  const int row_a = kGated ? blockIdx.x * 64 : blockIdx.x * kBlockRows;
  const int row_b = kGated ? f + blockIdx.x * 64 : row_a + kBoxRows;
  auto issue_w = [&](int s) {  // expects the whole stage (weights and x)
    unsigned char* st = smem + (s % kStages) * kStageBytes;
    const int k0 = (st0 + s) * kStageK;
    mbar_expect(full + s % kStages, kStageBytes);
    tma_2d(st, &wmap, k0, row_a, full + s % kStages);
    tma_2d(st + kWBox, &wmap, k0, row_b, full + s % kStages);
  };
  auto issue_x = [&](int s) {
    tma_2d(smem + (s % kStages) * kStageBytes + 2 * kWBox, &xmap, (st0 + s) * kStageK, 0, full + s % kStages);
  };
  grid_dependents_may_launch();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full + s, 1);
    mbar_init_fence();
    for (int s = 0; s < kStages && s < nst; ++s) issue_w(s);  // weights never change: before the wait
  }
  grid_dependency_wait();
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages && s < nst; ++s) issue_x(s);
  __syncthreads();  // the barriers are initialised before anyone waits on them

  // Fragment rows of tile i, half h: box (gated ? i : warp / 2), row (gated ? 16 warp : 32 (warp & 1) + 16 i) + 8h + sigma(g).
  int woff[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int box = kGated ? i : warp >> 1, row = (kGated ? 16 * warp : 32 * (warp & 1) + 16 * i) + 8 * h + sg;
      woff[i][h] = box * kWBox + row * 128;
    }
  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  for (int s = 0; s < nst; ++s) {
    mbar_wait(full + s % kStages, static_cast<uint32_t>((s / kStages) & 1));
    const unsigned char* st = smem + (s % kStages) * kStageBytes;
#pragma unroll
    for (int kc = 0; kc < 2; ++kc) {
      const int chunk = ((4 * kc + t) ^ sg) * 16;
      uint4 wv[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[i][h] = *reinterpret_cast<const uint4*>(st + woff[i][h] + chunk);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(st + 2 * kWBox + (j * 8 + sg) * 128 + chunk);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint4 lo = wv[i][0], hi = wv[i][1];
          mma16816<T>(acc[i][j], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
          mma16816<T>(acc[i][j], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
        }
      }
    }
    __syncthreads();  // every warp is done with this slot
    if (threadIdx.x == 0 && s + kStages < nst) {
      fence_proxy_async();
      issue_w(s + kStages);
      issue_x(s + kStages);
    }
  }

  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  // Fragment (i, j, e): weight fragment row g (+ 8 for e >= 2), x fragment column 2t (+ 1 for odd e).
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = j * 8 + sigma(2 * t + (e & 1)), r = 8 * (e >> 1) + sg;
      if (m >= a.m) continue;
      if constexpr (kGated) {
        const int64_t n = static_cast<int64_t>(blockIdx.x) * 64 + 16 * warp + r;
        if (n >= f) continue;
        if (slices > 1) {
          float* p = a.part + (static_cast<int64_t>(split) * a.m + m) * a.n;
          p[n] = acc[0][j][e];
          p[f + n] = acc[1][j][e];
        } else {
          const float gv = rounded(acc[0][j][e], bias, n), uv = rounded(acc[1][j][e], bias, f + n);
          y[static_cast<int64_t>(m) * f + n] = from_f32<T>(activate<A>(gv) * uv);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int64_t n = static_cast<int64_t>(blockIdx.x) * kBlockRows + 32 * warp + 16 * i + r;
          if (n >= a.n) continue;
          if (slices > 1) a.part[(static_cast<int64_t>(split) * a.m + m) * a.n + n] = acc[i][j][e];
          else y[static_cast<int64_t>(m) * a.n + n] = from_f32<T>(rounded(acc[i][j][e], bias, n));
        }
      }
    }
  if (slices == 1) return;

  // Several slices: the last block of this row tile adds every slice's partial, in slice order.
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = a.counters + blockIdx.x;
    s_last = atomicAdd(counter, 1) == slices - 1;
    if (s_last) *counter = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // kQ outputs per thread at a time and kS slices per round, every load of a round issued before
  // the first add (the sums stay in slice order).
  constexpr int kQ = 4, kS = kGated ? 2 : 4, kL = kGated ? 2 : 1;
  const int cols = kGated ? 64 : kBlockRows;  // outputs per x row in this tile
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * cols, n_out = kGated ? f : a.n;
  const int64_t slice_stride = static_cast<int64_t>(a.m) * a.n;
  for (int base = threadIdx.x; base < a.m * cols; base += kThreads * kQ) {
    const float* p[kQ][kL];
    bool ok[kQ];
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int idx = base + q * kThreads, m = idx / cols;
      const int64_t n = n0 + idx % cols;
      ok[q] = idx < a.m * cols && n < n_out;
      p[q][0] = a.part + static_cast<int64_t>(ok[q] ? m : 0) * a.n + (ok[q] ? n : 0);
      if constexpr (kGated) p[q][kL - 1] = p[q][0] + f;
    }
    float sum[kQ][kL];
#pragma unroll
    for (int q = 0; q < kQ; ++q)
#pragma unroll
      for (int l = 0; l < kL; ++l) sum[q][l] = 0.0f;
    for (int s0 = 0; s0 < slices; s0 += kS) {
      float v[kS][kQ][kL];
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int q = 0; q < kQ; ++q)
#pragma unroll
          for (int l = 0; l < kL; ++l) v[s][q][l] = s0 + s < slices ? __ldcg(p[q][l] + (s0 + s) * slice_stride) : 0.0f;
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int q = 0; q < kQ; ++q)
#pragma unroll
          for (int l = 0; l < kL; ++l)
            if (s0 + s < slices) sum[q][l] += v[s][q][l];
    }
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      if (!ok[q]) continue;
      const int idx = base + q * kThreads, m = idx / cols;
      const int64_t n = n0 + idx % cols;
      if constexpr (kGated) {
        y[static_cast<int64_t>(m) * f + n] = from_f32<T>(activate<A>(rounded(sum[q][0], bias, n)) * rounded(sum[q][kL - 1], bias, f + n));
      } else {
        y[static_cast<int64_t>(m) * a.n + n] = from_f32<T>(rounded(sum[q][0], bias, n));
      }
    }
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Slices of K: MLXB_ROWS_SLICES when set (1..64, at most one per stage), else the smallest power
// of two that gives >= 0.9 blocks per SM, as long as a slice keeps >= 512 values of K. (Fitted
// to the stop-19 timings in scripts/cuda/NOTES.md: one block streams an SM's full rate, and each
// extra slice costs partial traffic and a ticket.)
int pick_slices(int64_t tiles, int64_t k) {
  const int64_t stages = k / kStageK;
  const int forced = env_int("MLXB_ROWS_SLICES", 0);
  if (forced > 0) return static_cast<int>(std::min<int64_t>({forced, 64, stages}));
  int s = 1;
  while (10 * tiles * s < 9 * static_cast<int64_t>(sm_count()) && k / (2 * s) >= 512 && 2 * s <= stages) s *= 2;
  return s;
}

template <typename T, int NT, bool kGated, Activation A>
void launch(const CUtensorMap& wmap, const CUtensorMap& xmap, const RowsArgs& a, int64_t tiles, int slices) {
  static bool configured = false;  // the attribute is per instantiation and process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(rows_gemm_kernel<T, NT, kGated, A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kSmemBytes)));
    configured = true;
  }
  launch_kernel(rows_gemm_kernel<T, NT, kGated, A>, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)), dim3(kThreads),
                kSmemBytes, programmatic_launch(), wmap, xmap, a);
}

template <typename T, bool kGated, Activation A>
void launch_nt(const CUtensorMap& wmap, const CUtensorMap& xmap, const RowsArgs& a, int64_t tiles, int slices) {
  if (a.m <= 16) launch<T, 2, kGated, A>(wmap, xmap, a, tiles, slices);
  else launch<T, 4, kGated, A>(wmap, xmap, a, tiles, slices);
}

// MLXB_ROWS_GEMM, read once; set_rows_gemm_enabled overrides it (the checks switch it per call).
std::atomic<int>& rows_flag() {
  static std::atomic<int> on{env_int("MLXB_ROWS_GEMM", 0) != 0 ? 1 : 0};
  return on;
}

}  // namespace

void set_rows_gemm_enabled(bool on) { rows_flag().store(on ? 1 : 0, std::memory_order_relaxed); }

bool rows_gemm(const Tensor& x, const Tensor& w, const Tensor* bias, const Activation* act, Tensor& y) {
  if (!rows_flag().load(std::memory_order_relaxed) || compute_major() < 9) return false;
  const DType d = x.dtype();
  if ((d != DType::BF16 && d != DType::F16) || w.dtype() != d || y.dtype() != d || (bias && bias->dtype() != d)) return false;
  if (w.ndim() != 2 || !x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous() || (bias && !bias->is_contiguous())) return false;
  const int64_t n = w.dim(0), k = w.dim(1);
  if (k == 0 || k % kStageK != 0 || x.numel() % k != 0) return false;
  const int64_t m = x.numel() / k;
  const int64_t n_out = act ? n / 2 : n;
  if (m <= kGemvMaxRows || m > kRowsGemmMax || (act && n % 2 != 0) || y.numel() != m * n_out || (bias && bias->numel() != n)) return false;
  if (n > INT32_MAX / 2 || k > INT32_MAX / 2 || n * k > (int64_t{1} << 28)) return false;  // not the LM head
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &y})
    if (reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
  const int64_t tiles = ceil_div(n_out, act ? 64 : kBlockRows);
  const int slices = pick_slices(tiles, k);
  if (slices > 1 && tiles > kSyncCounters) return false;
  CUtensorMap wmap, xmap;
  if (!encode_tma_2d(&wmap, w.data(), d == DType::BF16, n, k, k, kBoxRows, kStageK) ||
      !encode_tma_2d(&xmap, x.data(), d == DType::BF16, m, k, k, 32, kStageK))
    return false;
  RowsArgs a{};
  a.bias = bias ? bias->data() : nullptr;
  a.y = y.data();
  a.m = static_cast<int>(m);
  a.n = static_cast<int>(n);
  a.k = static_cast<int>(k);
  std::unique_ptr<Scratch> part;
  if (slices > 1) {
    part = std::make_unique<Scratch>(static_cast<int64_t>(slices) * m * n * static_cast<int64_t>(sizeof(float)), "the few-row GEMM partials");
    a.part = part->as<float>();
    a.counters = sync_counters();
  }
  MLXB_FLOAT_SWITCH(d, T, {
    if constexpr (!std::is_same_v<T, float>) {
      if (!act) launch_nt<T, false, Activation::kSiLU>(wmap, xmap, a, tiles, slices);
      else if (*act == Activation::kSiLU) launch_nt<T, true, Activation::kSiLU>(wmap, xmap, a, tiles, slices);
      else if (*act == Activation::kGeluExact) launch_nt<T, true, Activation::kGeluExact>(wmap, xmap, a, tiles, slices);
      else launch_nt<T, true, Activation::kGeluTanh>(wmap, xmap, a, tiles, slices);
    }
  });
  MLXB_CUDA_LAUNCHED("matmul (few rows)");
  return true;
}

}  // namespace mlxb::cuda
