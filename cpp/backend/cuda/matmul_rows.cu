// y[M, N] = x[M, K] · w[N, K]^T for 9..32 rows of x (the batched decode step's projections):
// 16-bit x, w and y, float32 accumulation, on the tensor cores, launched programmatically (the
// weights are requested before the kernel waits for the one that writes x; cuBLASLt's kernels
// cannot be launched so, see scripts/cuda/NOTES.md). Opt-in (MLXB_ROWS_GEMM=1): on the H200 it is
// ~2x slower than cuBLASLt at the 8B / 1B serving shapes (NOTES.md, "A few-row GEMM that waits").
//
// Roles: weight rows are the mma M dimension (two 16-row tiles per warp), rows of x the N
// dimension (up to four 8-row tiles). Per 32-value chunk c of K, lane (g, t) loads 16 bytes of
// weight rows g, g + 8, g + 16, g + 24 at k = 32c + 8t .. +8; the mma of k-step 0 takes words 0, 1
// of those loads as its A fragment and words 0, 1 of row g of x at the same k as its B fragment,
// k-step 1 words 2, 3. A and B see one permutation of k inside a chunk, so the products and the
// sums are those of the plain order (the permutation only moves which k a lane holds).
//
// A block is 4 warps along N (128 weight rows) x 2 warps along K; K is also cut into slices over
// blocks (grid.y). Each block stages its slice of x in shared memory once; each warp streams its
// weight rows through its own cp.async ring in shared memory (kStages chunks). The two K warps add in
// shared memory (fixed order); with several slices the blocks write float32 partials and the last
// block of a row tile (sync counters) adds them in slice order, so the result does not depend on
// timing. Gated form: [gate; up] weights [2F, K], a warp's two tiles are 16 gate rows and the same
// 16 up rows, and the output [M, F] is act(round(gate)) * round(up), as matmul then gated_act.
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/matmul_rows.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/smem_copy.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kRowWarps = 4, kKWarps = 2, kThreads = 32 * kRowWarps * kKWarps;
constexpr int kBlockRows = 32 * kRowWarps;  // weight rows per block
constexpr int kSliceUnit = 128;             // K of a slice is a multiple of this
constexpr int kMaxSlice = 1024;
constexpr int kPad = 32;  // staged x row = slice + 64 bytes: rows g and g + 1 fall on other banks

struct RowsArgs {
  const void* x;
  const void* w;
  const void* bias;  // [N] in w's dtype, or null
  void* y;
  float* part;    // [slices, M, N] partials (slices > 1)
  int* counters;  // one per row tile (slices > 1)
  int m, n, k;    // n: weight rows (2F when gated)
  int slice;      // K per block
};

// Shared memory: the staged x (later the K warps' reduction), then the warps' weight rings.
__host__ __device__ constexpr size_t x_bytes(int nt, int slice) {
  return sizeof(uint16_t) * 8 * nt * (slice + kPad) > sizeof(float) * kRowWarps * 32 * 2 * nt * 4
             ? sizeof(uint16_t) * 8 * nt * (slice + kPad)
             : sizeof(float) * kRowWarps * 32 * 2 * nt * 4;
}
constexpr size_t ring_bytes(int stages) { return 16 * 4 * 32 * stages * (kThreads / 32); }
size_t smem_bytes(int nt, int slice, int stages) { return x_bytes(nt, slice) + ring_bytes(stages); }

template <typename T>
__device__ __forceinline__ float rounded(float v, const T* bias, int64_t n) {
  const float r = to_f32(from_f32<T>(v));
  return bias ? to_f32(from_f32<T>(r + to_f32(bias[n]))) : r;
}

// Weight row of fragment row r (0..31) of warp tile `wt` (32 rows); rows past the end are clamped
// (their results are never stored).
template <bool kGated>
__device__ __forceinline__ int64_t weight_row(const RowsArgs& a, int64_t wt, int r) {
  if constexpr (kGated) {
    const int f = a.n / 2;
    const int64_t j = min(wt * 16 + (r & 15), static_cast<int64_t>(f - 1));
    return r < 16 ? j : f + j;
  } else {
    return min(wt * 32 + r, static_cast<int64_t>(a.n - 1));
  }
}

template <typename T, int NT, int kStages, bool kGated, Activation A>
__global__ void __launch_bounds__(kThreads, 2) rows_gemm_kernel(RowsArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int rw = warp % kRowWarps, kw = warp / kRowWarps;
  const int slices = gridDim.y, split = blockIdx.y;
  const int64_t wt = static_cast<int64_t>(blockIdx.x) * kRowWarps + rw;  // the warp's 32-row tile
  const int xstride = a.slice + kPad, half = a.slice / kKWarps, chunks = half / 32;
  const int64_t k0 = static_cast<int64_t>(split) * a.slice + kw * half;
  grid_dependents_may_launch();

  // Each warp streams its weights through a private ring of kStages chunks in shared memory
  // (cp.async; a lane copies its four 16-byte pieces and later reads back exactly those, so no
  // barrier is needed), kStages - 1 chunks in flight while one is used.
  const T* w = static_cast<const T*>(a.w);
  const T* wr[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) wr[r] = w + weight_row<kGated>(a, wt, g + 8 * r) * a.k + k0 + 8 * t;
  uint4* ring = reinterpret_cast<uint4*>(smem_raw + x_bytes(NT, a.slice)) + warp * (kStages * 4 * 32) + lane;
  auto issue = [&](int c) {  // chunk c into its stage; always commits (an empty group past the end)
    if (c < chunks) {
      uint4* st = ring + (c % kStages) * (4 * 32);
#pragma unroll
      for (int r = 0; r < 4; ++r) cp_async16(st + r * 32, wr[r] + c * 32, 16);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) issue(c);  // weights never change: requested before the wait
  grid_dependency_wait();

  {  // this block's slice of x, rows past M as zeros
    const T* x = static_cast<const T*>(a.x) + static_cast<int64_t>(split) * a.slice;
    const int vecs = a.slice / 8;
    for (int i = threadIdx.x; i < 8 * NT * vecs; i += kThreads) {
      const int r = i / vecs, v = i - r * vecs;
      const bool in = r < a.m;
      cp_async16(xs + r * xstride + v * 8, x + static_cast<int64_t>(in ? r : 0) * a.k + v * 8, in ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }

  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  const T* xw = xs + g * xstride + kw * half + 8 * t;
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kStages - 2>();  // chunk c has landed (this lane's copies)
    const uint4* st = ring + (c % kStages) * (4 * 32);
    uint4 buf[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) buf[r] = st[r * 32];
    issue(c + kStages - 1);  // into the stage chunk c - 1 used
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 xv = *reinterpret_cast<const uint4*>(xw + j * 8 * xstride + c * 32);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint4 lo = buf[2 * i], hi = buf[2 * i + 1];
        const uint32_t s0[4] = {lo.x, hi.x, lo.y, hi.y}, s1[4] = {lo.z, hi.z, lo.w, hi.w};
        mma16816<T>(acc[i][j], s0, xv.x, xv.y);
        mma16816<T>(acc[i][j], s1, xv.z, xv.w);
      }
    }
  }

  // The second K warp of each row tile hands its sums to the first (fixed order: kw 0 + kw 1).
  __syncthreads();  // every warp is done with the staged x
  float* red = reinterpret_cast<float*>(smem_raw) + (rw * 32 + lane) * (2 * NT * 4);
  if (kw == 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[(i * NT + j) * 4 + e] = acc[i][j][e];
  }
  __syncthreads();
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  const int f = a.n / 2;
  if (kw == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += red[(i * NT + j) * 4 + e];
    // Fragment (i, j, e): weight row of tile i at g (+ 8 for e >= 2), x row j * 8 + 2t (+ 1 for odd e).
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = j * 8 + 2 * t + (e & 1), r = g + (e >> 1) * 8;
        if (m >= a.m) continue;
        if (slices > 1) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int64_t n = kGated ? (i == 0 ? wt * 16 + r : f + wt * 16 + r) : wt * 32 + i * 16 + r;
            if ((kGated && wt * 16 + r < f) || (!kGated && n < a.n))
              a.part[(static_cast<int64_t>(split) * a.m + m) * a.n + n] = acc[i][j][e];
          }
        } else if constexpr (kGated) {
          const int64_t n = wt * 16 + r;
          if (n < f) {
            const float gv = rounded(acc[0][j][e], bias, n), uv = rounded(acc[1][j][e], bias, f + n);
            y[static_cast<int64_t>(m) * f + n] = from_f32<T>(activate<A>(gv) * uv);
          }
        } else {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int64_t n = wt * 32 + i * 16 + r;
            if (n < a.n) y[static_cast<int64_t>(m) * a.n + n] = from_f32<T>(rounded(acc[i][j][e], bias, n));
          }
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
  const int cols = kGated ? kBlockRows / 2 : kBlockRows;  // outputs per x row in this tile
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

// K per block: MLXB_ROWS_SLICE when it divides K (a multiple of 128, at most 1024), else the
// largest such divisor of K that still gives >= one block per SM; 0 when K has none.
int pick_slice(int64_t tiles, int64_t k) {
  const int forced = env_int("MLXB_ROWS_SLICE", 0);
  if (forced > 0 && forced % kSliceUnit == 0 && forced <= kMaxSlice && k % forced == 0) return forced;
  int best = 0;
  for (int s = kMaxSlice; s >= kSliceUnit; s -= kSliceUnit) {
    if (k % s != 0) continue;
    best = s;
    if (tiles * (k / s) >= sm_count()) break;
  }
  return best;
}

template <typename T, int NT, int S, bool kGated, Activation A>
void launch(const RowsArgs& a, int64_t tiles, int slices) {
  const size_t bytes = smem_bytes(NT, a.slice, S);
  static bool configured = false;  // the attribute is per instantiation and process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(rows_gemm_kernel<T, NT, S, kGated, A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem_bytes(NT, kMaxSlice, S))));
    configured = true;
  }
  launch_kernel(rows_gemm_kernel<T, NT, S, kGated, A>, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)), dim3(kThreads),
                bytes, programmatic_launch(), a);
}

// MLXB_ROWS_STAGES=8: rings of 8 chunks per warp instead of 4 (one block per SM).
template <typename T, bool kGated, Activation A>
void launch_nt(const RowsArgs& a, int64_t tiles, int slices) {
  const bool deep = env_int("MLXB_ROWS_STAGES", 4) == 8;
  if (a.m <= 16) deep ? launch<T, 2, 8, kGated, A>(a, tiles, slices) : launch<T, 2, 4, kGated, A>(a, tiles, slices);
  else deep ? launch<T, 4, 8, kGated, A>(a, tiles, slices) : launch<T, 4, 4, kGated, A>(a, tiles, slices);
}

bool rows_enabled() { return env_int("MLXB_ROWS_GEMM", 0) != 0; }  // read per call (the checks switch it)

}  // namespace

bool rows_gemm(const Tensor& x, const Tensor& w, const Tensor* bias, const Activation* act, Tensor& y) {
  if (!rows_enabled() || compute_major() < 8) return false;
  const DType d = x.dtype();
  if ((d != DType::BF16 && d != DType::F16) || w.dtype() != d || y.dtype() != d || (bias && bias->dtype() != d)) return false;
  if (w.ndim() != 2 || !x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous() || (bias && !bias->is_contiguous())) return false;
  const int64_t n = w.dim(0), k = w.dim(1);
  if (k == 0 || x.numel() % k != 0) return false;
  const int64_t m = x.numel() / k;
  const int64_t n_out = act ? n / 2 : n;
  if (m <= kGemvMaxRows || m > kRowsGemmMax || (act && n % 2 != 0) || y.numel() != m * n_out || (bias && bias->numel() != n)) return false;
  if (n > INT32_MAX / 2 || k > INT32_MAX / 2 || n * k > (int64_t{1} << 28)) return false;  // not the LM head
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &y})
    if (reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return false;
  const int64_t tiles = ceil_div(act ? n_out : n, act ? kBlockRows / 2 : kBlockRows);
  const int slice = pick_slice(tiles, k);
  if (slice == 0) return false;
  const int slices = static_cast<int>(k / slice);
  if (slices > 65535 || (slices > 1 && tiles > kSyncCounters)) return false;
  RowsArgs a{};
  a.x = x.data();
  a.w = w.data();
  a.bias = bias ? bias->data() : nullptr;
  a.y = y.data();
  a.m = static_cast<int>(m);
  a.n = static_cast<int>(n);
  a.k = static_cast<int>(k);
  a.slice = slice;
  std::unique_ptr<Scratch> part;
  if (slices > 1) {
    part = std::make_unique<Scratch>(static_cast<int64_t>(slices) * m * n * static_cast<int64_t>(sizeof(float)), "the few-row GEMM partials");
    a.part = part->as<float>();
    a.counters = sync_counters();
  }
  MLXB_FLOAT_SWITCH(d, T, {
    if constexpr (!std::is_same_v<T, float>) {
      if (!act) launch_nt<T, false, Activation::kSiLU>(a, tiles, slices);
      else if (*act == Activation::kSiLU) launch_nt<T, true, Activation::kSiLU>(a, tiles, slices);
      else if (*act == Activation::kGeluExact) launch_nt<T, true, Activation::kGeluExact>(a, tiles, slices);
      else launch_nt<T, true, Activation::kGeluTanh>(a, tiles, slices);
    }
  });
  MLXB_CUDA_LAUNCHED("matmul (few rows)");
  return true;
}

}  // namespace mlxb::cuda
