// One-row projections of a decode step fused with their neighbours (ops.h: matmul_add,
// norm_matmul, norm_gated_matmul, norm_qkv_rope), so that a layer is five launches instead of
// nine. One kernel, four epilogues:
//   store   y[n] = x·w[n] (+ bias)                       (norm_matmul)
//   add     resid[n] += round(x·w[n] (+ bias))            (matmul_add: o and down projections)
//   gated   out[n] = act(round(g)) * round(u), rows n and F + n   (norm_gated_matmul)
//   rope    rows (d, d + D/2) of one head: q and k heads rotated, k and v also stored into the
//           caches at this step's slot                    (norm_qkv_rope)
// Persistent blocks (as many as fit at once) stage the row x in shared memory by cp.async; with
// a norm it is normalised there (rms_norm's float32 expressions, and its sum of squares in
// rms_norm's exact order: the virtual threads of its launch are emulated, then its two-level
// butterfly). Each warp streams its units' weights through two register buffers (the next
// chunk in flight while the current one is multiplied) and computes each row with the per-lane
// order of gemv_kernel (lane-strided 16-byte vectors, fmaf in element order, then warp_sum), so
// every result is bit-identical to the unfused ops. On Hopper the kernels are launched
// programmatically (MLXB_CUDA_PDL=0: not): the first weights load while the previous kernel
// still runs, and the kernel waits for it before reading x.
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/backend.h"
#include "backend/cuda/activation.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rms_row.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kU = 8;                // 16-byte weight vectors per lane and chunk (all rows of a unit)
constexpr int64_t kMaxK = 20480;      // staged row in shared memory (2-byte elements, 40 KB)
constexpr int64_t kMaxNormK = 10240;  // staged row and norm weights (40 KB)

enum class Epi { kStore, kAdd, kGated, kRope };

struct Args {
  const void* x = nullptr;       // [K]
  const void* norm_w = nullptr;  // [K] or null (x used as is)
  float eps = 0.0f;
  bool add_one = false;
  const void* w = nullptr;       // [N, K]
  const void* bias = nullptr;    // [N] or null
  void* y = nullptr;             // store: [N]; add: resid [N]; gated: [F]; rope: qkv [N]
  int64_t units = 0, k = 0, f = 0;  // units: warps' work items; f: gated half (F)
  int64_t n = 0;                    // store / add: rows of w
  // rope epilogue
  int64_t hq = 0, hkv = 0, dim = 0, half = 0;
  const int32_t* pos = nullptr;
  const float* inv_freq = nullptr;
  float mscale = 1.0f;
  const int32_t* slots = nullptr;  // null: no cache writes
  void* kc = nullptr;
  void* vc = nullptr;
  int64_t s_count = 0, head_stride = 0;
};

template <typename T>
__device__ __forceinline__ void cvt8(const uint4& u, float* v) {
  const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = to_f32(e[i]);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory"); }

// Normalises the staged row xs in place with the staged norm weights ns: the sum of squares in
// rms_norm's order, then rms_norm's per-element float32 expression (both rms_row.cuh).
template <typename T>
__device__ __forceinline__ void normalise_row(const Args& a, T* xs, const T* ns) {
  const int tid = threadIdx.x;
  const int64_t h = a.k;
  const float inv = rms_inv_row([&](int64_t i) { return to_f32(xs[i]); }, h, a.eps);
  uint4* sv = reinterpret_cast<uint4*>(xs);
  const uint4* nv = reinterpret_cast<const uint4*>(ns);
  for (int64_t i = tid; i < h / 8; i += kThreads) sv[i] = rms_scale8<T>(sv[i], nv[i], inv, a.add_one);
  __syncthreads();
}

// Persistent blocks: warp g of the grid takes units g, g + G, ... (G = all warps). A warp's work
// is a stream of chunks (unit, batch), a batch being kU / R 16-byte vectors per row and lane;
// the next chunk's weights are loaded while the current one is multiplied (two register
// buffers), so loads stay in flight across batches and units. The row x (and the norm weights)
// arrive in shared memory by cp.async, issued before the first weights.
//
// kWide, chosen at launch (see wide()) where the matrix has units enough to fill every resident
// warp that way:
// - store, add: a unit is two neighbouring rows (else one), so each 16-byte piece of x read from
//   shared memory serves two weight vectors. With one row per unit the x reads double the L1
//   traffic: ncu on the 8B down projection showed L1/TEX at 85% of its peak with DRAM at 63%
//   (3.05 TB/s), against 3.78 TB/s for gate/up, whose units are two rows already.
// - rope: half as many vectors per chunk, so that three blocks fit per SM (72 registers): the 8B
//   q/k/v's 3,072 units take one warp each instead of 1.45 on two blocks' 2,112 warps (DRAM 51%).
template <Epi E, Activation A, typename T, bool kWide>
__global__ void __launch_bounds__(kThreads, E == Epi::kRope && kWide ? 3 : 2) fused_gemv_kernel(Args a) {
  constexpr bool kRows = E == Epi::kStore || E == Epi::kAdd;
  constexpr int R = kRows && !kWide ? 1 : 2;
  constexpr int U = E == Epi::kRope && kWide ? kU / 4 : kU / R;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  T* ns = xs + a.k;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t k = a.k, vecs = k / 8, batches = (vecs + 32 * U - 1) / (32 * U);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  grid_dependents_may_launch();
  const T* w = static_cast<const T*>(a.w);
  auto unit_rows = [&](int64_t u, int64_t* rows) {
    if constexpr (E == Epi::kGated) {
      rows[0] = u;
      rows[R - 1] = a.f + u;
    } else if constexpr (E == Epi::kRope) {
      const int64_t head = u / a.half, i = u % a.half;
      rows[0] = head * a.dim + i;
      rows[R - 1] = head * a.dim + i + a.half;
    } else if constexpr (R == 2) {  // the last unit of an odd row count repeats its row (stored once)
      rows[0] = 2 * u;
      rows[R - 1] = min(2 * u + 1, a.n - 1);
    } else {
      rows[0] = u;
    }
  };
  auto load = [&](uint4 (&buf)[R][U], int64_t u, int64_t b) {
    int64_t rows[R];
    unit_rows(u, rows);
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int64_t v = b * 32 * U + lane + 32 * q;
      if (v < vecs)
#pragma unroll
        for (int r = 0; r < R; ++r) buf[r][q] = __ldg(reinterpret_cast<const uint4*>(w + rows[r] * k) + v);
    }
  };
  uint4 wa[R][U], wb[R][U];
  int64_t cu = static_cast<int64_t>(blockIdx.x) * kWarps + warp, cb = 0;
  if (cu < a.units) load(wa, cu, 0);  // weights never change: loaded before the wait
  grid_dependency_wait();             // the kernel before this one (writer of x) has finished
  {
    const T* x = static_cast<const T*>(a.x);
    const T* nw = static_cast<const T*>(a.norm_w);
    for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
      cp_async16(xs + 8 * i, x + 8 * i);
      if (nw) cp_async16(ns + 8 * i, nw + 8 * i);
    }
  }
  cp_async_wait_all();
  __syncthreads();
  if (a.norm_w) normalise_row<T>(a, xs, ns);
  if (cu >= a.units) return;
  const uint4* xv = reinterpret_cast<const uint4*>(xs);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  auto finish = [&](int64_t u) {
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = warp_sum(acc[r]);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    if (lane != 0) return;
    int64_t rows[R];
    unit_rows(u, rows);
    if constexpr (E == Epi::kStore || E == Epi::kAdd) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t n = R * u + r;
        if (n >= a.n) break;
        const float b = bias ? to_f32(bias[n]) : 0.0f;
        if constexpr (E == Epi::kStore) {
          y[n] = from_f32<T>(s[r] + b);
        } else {
          const T branch = from_f32<T>(s[r] + b);
          y[n] = from_f32<T>(to_f32(y[n]) + to_f32(branch));
        }
      }
    } else if constexpr (E == Epi::kGated) {
      const float bg = bias ? to_f32(bias[rows[0]]) : 0.0f, bu = bias ? to_f32(bias[rows[1]]) : 0.0f;
      const float gr = to_f32(from_f32<T>(s[0] + bg)), ur = to_f32(from_f32<T>(s[1] + bu));
      y[u] = from_f32<T>(activate<A>(gr) * ur);
    } else {
      const float ba = bias ? to_f32(bias[rows[0]]) : 0.0f, bb = bias ? to_f32(bias[rows[1]]) : 0.0f;
      const T ta = from_f32<T>(s[0] + ba), tb = from_f32<T>(s[1] + bb);
      const int64_t head = u / a.half, i = u % a.half;
      const int64_t slot = a.slots ? a.slots[0] : -1;
      const bool store = a.slots && slot >= 0 && slot < a.s_count;
      if (head < a.hq + a.hkv) {  // q or k head: rotate as rope_kernel
        float sn, cs;
        sincosf(static_cast<float>(a.pos[0]) * a.inv_freq[i], &sn, &cs);
        sn *= a.mscale;
        cs *= a.mscale;
        const float fa = to_f32(ta), fb = to_f32(tb);
        const T ra = from_f32<T>(rope_lo(fa, fb, cs, sn)), rb = from_f32<T>(rope_hi(fa, fb, cs, sn));
        y[rows[0]] = ra;
        y[rows[1]] = rb;
        if (head >= a.hq && store) {
          T* cr = static_cast<T*>(a.kc) + (head - a.hq) * a.head_stride + slot * a.dim;
          cr[i] = ra;
          cr[i + a.half] = rb;
        }
      } else {
        y[rows[0]] = ta;
        y[rows[1]] = tb;
        if (store) {
          T* cr = static_cast<T*>(a.vc) + (head - a.hq - a.hkv) * a.head_stride + slot * a.dim;
          cr[i] = ta;
          cr[i + a.half] = tb;
        }
      }
    }
  };
  // One chunk: queue the next chunk's loads into `nxt`, multiply `cur`, finish the unit after its
  // last batch. Returns whether a next chunk exists.
  auto step = [&](uint4 (&cur)[R][U], uint4 (&nxt)[R][U]) {
    int64_t nu = cu, nb = cb + 1;
    if (nb == batches) {
      nb = 0;
      nu = cu + stride;
    }
    if (nu < a.units) load(nxt, nu, nb);
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int64_t v = cb * 32 * U + lane + 32 * q;
      if (v < vecs) {
        float x8[8];
        cvt8<T>(xv[v], x8);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float w8[8];
          cvt8<T>(cur[r][q], w8);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] = fmaf(w8[j], x8[j], acc[r]);
        }
      }
    }
    if (cb == batches - 1) finish(cu);
    cu = nu;
    cb = nb;
    return cu < a.units;
  };
  while (step(wa, wb) && step(wb, wa)) {
  }
}

// Blocks resident at once (persistent grid), per kernel instantiation and shared memory size;
// asked of the runtime once per pair (a launch on the decode path must not pay for the query).
template <typename K>
int64_t resident_blocks(K kernel, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, size_t>, int64_t> known;
  const std::pair<const void*, size_t> key{reinterpret_cast<const void*>(kernel), smem};
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess || per_sm < 1) {
    cudaGetLastError();
    per_sm = 1;
  }
  const int64_t blocks = static_cast<int64_t>(per_sm) * sm_count();
  known.emplace(key, blocks);
  return blocks;
}

// Whether the kWide form runs, and the units it takes: store / add when the row pairs still
// occupy >= 90% of the warps resident in the plain form (8B o and down: 2,048 pairs on 2,112
// warps; the 1B's 1,024 pairs would idle half of them), rope when its units outnumber those warps
// (8B q/k/v, not 1B).
struct Form {
  bool wide = false;
  int64_t units = 0;
};

template <Epi E, Activation A, typename T>
Form form(const Args& a, size_t smem) {
  if constexpr (E == Epi::kGated) {
    return {false, a.units};
  } else {
    const int64_t warps = resident_blocks(fused_gemv_kernel<E, A, T, false>, smem) * kWarps;
    if constexpr (E == Epi::kRope) return {a.units > warps, a.units};
    else if (10 * ceil_div(a.n, 2) >= 9 * warps) return {true, ceil_div(a.n, 2)};
    else return {false, a.units};
  }
}

template <Epi E, Activation A, typename T>
void launch_t(Args a) {
  const size_t smem = static_cast<size_t>(a.k) * 2 * (a.norm_w ? 2 : 1);
  const Form f = form<E, A, T>(a, smem);
  a.units = f.units;
  auto kernel = f.wide ? fused_gemv_kernel<E, A, T, true> : fused_gemv_kernel<E, A, T, false>;
  const int64_t grid = std::min(ceil_div(a.units, kWarps), resident_blocks(kernel, smem));
  launch_kernel(kernel, dim3(static_cast<unsigned>(std::max<int64_t>(grid, 1))), dim3(kThreads), smem, programmatic_launch(), a);
}

template <Epi E, Activation A>
void launch(const Args& a, DType dt) {
  if (dt == DType::BF16) launch_t<E, A, __nv_bfloat16>(a);
  else launch_t<E, A, __half>(a);
}

bool on_device(const Tensor& t) { return t.defined() && t.device() == Device::kCUDA && t.is_contiguous(); }
bool aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// The shapes and dtypes the kernel covers: one row x [K] and w [N, K] of one 2-byte float dtype,
// K % 8 == 0, 16-byte aligned rows, the staged row within 40 KB; bias [N] of that dtype.
bool fits(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int64_t y_count) {
  if (!on_device(x) || !on_device(w) || !on_device(y) || w.ndim() != 2) return false;
  const DType dt = x.dtype();
  if ((dt != DType::BF16 && dt != DType::F16) || w.dtype() != dt || y.dtype() != dt) return false;
  const int64_t k = w.dim(1);
  if (x.numel() != k || k % 8 != 0 || k == 0 || k > kMaxK || y.numel() != y_count || !aligned(x) || !aligned(w)) return false;
  if (w.dim(0) > (int64_t{1} << 30)) return false;
  return !bias || (on_device(*bias) && bias->dtype() == dt && bias->numel() == w.dim(0));
}

bool norm_fits(const NormArgs& n, const Tensor& x) {
  return on_device(n.w) && n.w.dtype() == x.dtype() && n.w.numel() == x.numel() && x.numel() <= kMaxNormK && aligned(n.w);
}

Args base_args(const Tensor& x, const NormArgs* n, const Tensor& w, const Tensor* bias, Tensor& y) {
  Args a;
  a.x = x.data();
  if (n) {
    a.norm_w = n->w.data();
    a.eps = n->eps;
    a.add_one = n->add_one;
  }
  a.w = w.data();
  a.bias = bias ? bias->data() : nullptr;
  a.y = y.data();
  a.k = w.dim(1);
  return a;
}

}  // namespace

void CudaBackend::matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid) {
  if (!fits(x, w, bias, resid, w.ndim() == 2 ? w.dim(0) : -1) || x.data() == resid.data()) {
    Backend::matmul_add(x, w, bias, resid);
    return;
  }
  Args a = base_args(x, nullptr, w, bias, resid);
  a.n = a.units = w.dim(0);
  launch<Epi::kAdd, Activation::kSiLU>(a, x.dtype());
}

void CudaBackend::norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y) {
  if (!fits(x, w, bias, y, w.ndim() == 2 ? w.dim(0) : -1) || !norm_fits(norm, x) || x.data() == y.data()) {
    Backend::norm_matmul(x, norm, w, bias, y);
    return;
  }
  Args a = base_args(x, &norm, w, bias, y);
  a.n = a.units = w.dim(0);
  launch<Epi::kStore, Activation::kSiLU>(a, x.dtype());
}

void CudaBackend::norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act,
                                    Tensor& out) {
  const int64_t f = w.ndim() == 2 ? w.dim(0) / 2 : -1;
  if (w.ndim() != 2 || w.dim(0) % 2 != 0 || !on_device(out) || out.numel() != f || !on_device(x) || !on_device(w) ||
      x.data() == out.data() || !norm_fits(norm, x) || !fits(x, w, bias, out, f)) {
    Backend::norm_gated_matmul(x, norm, w, bias, act, out);
    return;
  }
  Args a = base_args(x, &norm, w, bias, out);
  a.units = f;
  a.f = f;
  switch (act) {
    case Activation::kSiLU: launch<Epi::kGated, Activation::kSiLU>(a, x.dtype()); break;
    case Activation::kGeluExact: launch<Epi::kGated, Activation::kGeluExact>(a, x.dtype()); break;
    case Activation::kGeluTanh: launch<Epi::kGated, Activation::kGeluTanh>(a, x.dtype()); break;
  }
}

void CudaBackend::norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                                const Tensor& positions, const RopeArgs& rope, const Tensor& slots, Tensor& k_cache,
                                Tensor& v_cache, Tensor& qkv) {
  const int64_t d = shape.head_dim, heads = shape.heads + 2 * shape.kv_heads;
  const bool caches = slots.defined();
  bool ok = d > 0 && d % 2 == 0 && rope.rot_dim == d && !rope.interleaved && on_device(rope.inv_freq) &&
            rope.inv_freq.dtype() == DType::F32 && rope.inv_freq.numel() == d / 2 && on_device(positions) &&
            positions.dtype() == DType::I32 && positions.numel() == 1 && w.ndim() == 2 && w.dim(0) == heads * d &&
            norm_fits(norm, x) && x.data() != qkv.data() && fits(x, w, bias, qkv, heads * d);
  if (ok && caches) {
    ok = on_device(slots) && slots.dtype() == DType::I32 && slots.numel() == 1 && k_cache.defined() && v_cache.defined() &&
         k_cache.device() == Device::kCUDA && v_cache.device() == Device::kCUDA && k_cache.ndim() == 3 && v_cache.ndim() == 3 &&
         k_cache.dtype() == x.dtype() && v_cache.dtype() == x.dtype() && k_cache.dim(0) == shape.kv_heads &&
         v_cache.dim(0) == shape.kv_heads && k_cache.dim(2) == d && v_cache.dim(2) == d && v_cache.dim(1) == k_cache.dim(1) &&
         k_cache.stride(0) == v_cache.stride(0) && k_cache.stride(1) == d && k_cache.stride(2) == 1 && v_cache.stride(1) == d &&
         v_cache.stride(2) == 1;
  }
  if (!ok) {
    Backend::norm_qkv_rope(x, norm, w, bias, shape, positions, rope, slots, k_cache, v_cache, qkv);
    return;
  }
  Args a = base_args(x, &norm, w, bias, qkv);
  a.half = d / 2;
  a.units = heads * a.half;
  a.hq = shape.heads;
  a.hkv = shape.kv_heads;
  a.dim = d;
  a.pos = positions.ptr<int32_t>();
  a.inv_freq = rope.inv_freq.ptr<float>();
  a.mscale = rope.mscale;
  if (caches) {
    a.slots = slots.ptr<int32_t>();
    a.kc = k_cache.data();
    a.vc = v_cache.data();
    a.s_count = k_cache.dim(1);
    a.head_stride = k_cache.stride(0);
  }
  launch<Epi::kRope, Activation::kSiLU>(a, x.dtype());
}

}  // namespace mlxb::cuda
