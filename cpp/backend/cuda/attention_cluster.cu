// One-token decode attention on Hopper and later (attention.cuh: cluster_decode_attention). A
// thread-block cluster per (query row, key/value head) splits the visible keys among its blocks;
// each block stages its keys and values in shared memory, scores them for every query head of the
// group with an online softmax, and leaves its partial (max, sum, output) in shared memory. The
// blocks then combine the partials through distributed shared memory: no workspace in device
// memory, no atomic ticket, no second launch. The kernel is launched programmatically: before it
// waits for the kernel ahead of it (which wrote q and this step's key/value slot) each block asks
// L2 for its rows, which is safe because L2 is coherent and nothing is read into the SM yet.
//
// Split boundaries depend only on S (multiples of the 64-key stage, 32 for head dim 256), so a
// recorded step (S = capacity, kv_len on the device) and an eager one (S = length) over the same
// keys split them alike whenever both fit one stage per block (S up to 16 stages).
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/backend.h"
#include "backend/cuda/reduce.cuh"

namespace mlxb::cuda {

namespace cg = cooperative_groups;

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxCluster = 16;  // non-portable above 8; fewer where the GPU refuses
constexpr int kMaxGroup = 16;    // query heads per key/value head

template <int kD>
constexpr int stage_keys() {
  return kD >= 256 ? 32 : 64;
}

struct DecodeArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* q_pos;
  const int32_t* k_pos;
  const int32_t* kv_len;  // null: all S slots may hold keys
  void* out;
  int64_t hq, hkv, s, kv_stride;
  int64_t per;  // keys per block, a multiple of the stage
  float scale, softcap;
  int causal, window;
};

template <int kD>
size_t smem_bytes(int group) {
  constexpr int kK = stage_keys<kD>();
  return 2 * static_cast<size_t>(kK * (kD + 8) + kK * kD) + sizeof(float) * static_cast<size_t>(group * kD + group * (kD + 2));
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// kHW: query heads per warp (group <= 4 * kHW).
template <int kD, int kHW, typename T>
__global__ void __launch_bounds__(kThreads) cluster_decode_kernel(DecodeArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kK = stage_keys<kD>();
  constexpr int kRow = kD + 8;                   // padded key row: lanes reading their own key spread over the banks
  constexpr int kVecs = kD / 8;                  // 16-byte vectors per row
  constexpr int kE = kD / 32;                    // output elements per lane (contiguous)
  constexpr int kPer = kK / 32;                  // keys per lane per stage
  constexpr int kLoads = kK * kVecs / kThreads;  // 16-byte loads per thread per stage, of K and of V
  constexpr int kLines = kD * 2 / 128;           // 128-byte lines per row
  extern __shared__ __align__(16) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kK * kRow;
  const int group = static_cast<int>(a.hq / a.hkv);
  float* qs = reinterpret_cast<float*>(vs + kK * kD);
  float* part = qs + group * kD;  // [group][m, l, o[kD]]
  grid_dependents_may_launch();
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), blocks = static_cast<int>(cluster.num_blocks());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tg = blockIdx.x / blocks;
  const int64_t t = tg / a.hkv, g = tg % a.hkv;
  const int64_t n = a.kv_len ? min(a.s, static_cast<int64_t>(*a.kv_len)) : a.s;
  const int64_t j0 = static_cast<int64_t>(rank) * a.per, j1 = min(n, j0 + a.per);
  const T* kh = static_cast<const T*>(a.k) + g * a.kv_stride;
  const T* vh = static_cast<const T*>(a.v) + g * a.kv_stride;
  for (int64_t i = threadIdx.x; i < (j1 - j0) * kLines; i += kThreads) {
    const int64_t off = (j0 + i / kLines) * kD + (i % kLines) * 64;
    prefetch_l2(kh + off);
    prefetch_l2(vh + off);
  }
  grid_dependency_wait();
  const int qp = a.q_pos[t];
  const T* qrow = static_cast<const T*>(a.q) + (t * a.hq + g * group) * kD;
  for (int i = threadIdx.x; i < group * kD; i += kThreads) qs[i] = to_f32(qrow[i]);
  float m[kHW], l[kHW], o[kHW][kE];
#pragma unroll
  for (int h = 0; h < kHW; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kE; ++i) o[h][i] = 0.0f;
  }
  for (int64_t jb = j0; jb < j1; jb += kK) {
    const int cnt = j1 - jb < kK ? static_cast<int>(j1 - jb) : kK;
    uint4 kr[kLoads], vr[kLoads];
    int kp[kPer];
    kv_chunk_load<kD, kThreads>(kh, vh, jb, cnt, kr, vr, [](int64_t) { return true; });
#pragma unroll
    for (int u = 0; u < kPer; ++u) kp[u] = lane + 32 * u < cnt ? __ldg(a.k_pos + jb + lane + 32 * u) : -1;
    __syncthreads();  // the previous stage is no longer read (and q is in shared memory)
    kv_chunk_store<kD, kThreads, kLoads, kRow>(ks, vs, cnt, kr, vr);
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kHW; ++h) {
      const int hi = warp + h * kWarps;
      if (hi >= group) break;  // uniform across the warp
      const float* qh = qs + hi * kD;
      float s[kPer];
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        s[u] = -INFINITY;
        if (key_visible(kp[u], qp, a.causal, a.window)) {
          const T* krow = ks + (lane + 32 * u) * kRow;
          float dot = 0.0f;
#pragma unroll
          for (int d = 0; d < kD; d += 8) {
            uint4 w = *reinterpret_cast<const uint4*>(krow + d);
            const T* e8 = reinterpret_cast<const T*>(&w);
#pragma unroll
            for (int e = 0; e < 8; ++e) dot = fmaf(qh[d + e], to_f32(e8[e]), dot);
          }
          s[u] = score_transform(dot, a.scale, a.softcap);
        }
        mx = fmaxf(mx, s[u]);
      }
      const float m_new = fmaxf(m[h], warp_max(mx));
      if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
      const float corr = expf(m[h] - m_new);
      float p[kPer], ps = 0.0f;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        p[u] = expf(s[u] - m_new);
        ps += p[u];
      }
      l[h] = l[h] * corr + warp_sum(ps);
      m[h] = m_new;
#pragma unroll
      for (int i = 0; i < kE; ++i) o[h][i] *= corr;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
#pragma unroll 8
        for (int jj = 0; jj < 32; ++jj) {
          if (32 * u + jj >= cnt) break;
          const float pj = __shfl_sync(0xffffffffu, p[u], jj);
          const T* vrow = vs + (32 * u + jj) * kD + lane * kE;
#pragma unroll
          for (int i = 0; i < kE; ++i) o[h][i] = fmaf(pj, to_f32(vrow[i]), o[h][i]);
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < kHW; ++h) {
    const int hi = warp + h * kWarps;
    if (hi >= group) break;
    float* pr = part + hi * (kD + 2);
    if (lane == 0) {
      pr[0] = m[h];
      pr[1] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kE; ++i) pr[2 + lane * kE + i] = o[h][i];
  }
  cluster.sync();
  // Output element e = (head, dim) of the group goes to thread e of the cluster; the blocks'
  // partials are summed in rank order.
  T* orow = static_cast<T*>(a.out) + (t * a.hq + g * group) * kD;
  for (int e = rank * kThreads + threadIdx.x; e < group * kD; e += blocks * kThreads) {
    const int hi = e / kD, d = e % kD;
    float ms[kMaxCluster], ls[kMaxCluster], os[kMaxCluster];
    float mmax = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < blocks) {
        const float* pr = cluster.map_shared_rank(part, r) + hi * (kD + 2);
        ms[r] = pr[0];
        ls[r] = pr[1];
        os[r] = pr[2 + d];
        mmax = fmaxf(mmax, ms[r]);
      }
    }
    float lsum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < blocks && ms[r] != -INFINITY) {
        const float w = expf(ms[r] - mmax);
        lsum += ls[r] * w;
        acc += os[r] * w;
      }
    }
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    orow[e] = from_f32<T>(acc * inv);
  }
  cluster.sync();  // no block leaves while another reads its shared memory
#endif
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_ATTN_CLUSTER");  // opt-in until measured on a GPU
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

template <int kD, int kHW, typename T>
bool launch(const DecodeArgs& a, int64_t stages, int group) {
  auto kernel = cluster_decode_kernel<kD, kHW, T>;
  const size_t smem = smem_bytes<kD>(group);
  // Once per instantiation: the shared memory it needs and the largest cluster the GPU accepts.
  static const int max_cluster = [&] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes<kD>(kMaxGroup))) !=
        cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
      cudaGetLastError();
      return 8;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kMaxCluster);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem_bytes<kD>(kMaxGroup);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kMaxCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
      cudaGetLastError();
      return 8;
    }
    return kMaxCluster;
  }();
  if (max_cluster == 0) return false;
  int c = 1;
  while (c < stages && c < max_cluster) c *= 2;
  DecodeArgs args = a;
  args.per = stage_keys<kD>() * ceil_div(stages, static_cast<int64_t>(c));
  const int64_t grid = a.hkv * c;  // one query row
  if (grid > INT32_MAX) return false;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(c);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic_launch() ? 2 : 1;
  MLXB_CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, args));
  MLXB_CUDA_LAUNCHED("attention (cluster decode)");
  return true;
}

template <int kD, typename T>
bool launch_d(const DecodeArgs& a, int64_t stages, int group) {
  if (group <= 4) return launch<kD, 1, T>(a, stages, group);
  if (group <= 8) return launch<kD, 2, T>(a, stages, group);
  return launch<kD, 4, T>(a, stages, group);
}

template <typename T>
bool launch_t(const DecodeArgs& a, int64_t d, int group) {
  const int64_t stage = d == 256 ? 32 : 64;
  const int64_t stages = ceil_div(a.s, stage);
  if (d == 64) return launch_d<64, T>(a, stages, group);
  if (d == 128) return launch_d<128, T>(a, stages, group);
  return launch_d<256, T>(a, stages, group);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool cluster_decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                              const AttentionArgs& args, const AttnShape& sh, Tensor& out) {
  if (!enabled() || compute_major() < 9 || sh.t != 1 || sh.s < 1) return false;
  const DType dt = q.dtype();
  if ((dt != DType::BF16 && dt != DType::F16) || k.dtype() != dt || v.dtype() != dt || out.dtype() != dt) return false;
  if (sh.d != 64 && sh.d != 128 && sh.d != 256) return false;
  const int64_t group = sh.hq / sh.hkv;
  if (group < 1 || group > kMaxGroup || sh.kv_stride % 8 != 0 || !aligned16(k.data()) || !aligned16(v.data())) return false;
  DecodeArgs a{};
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.q_pos = q_pos.ptr<int32_t>();
  a.k_pos = k_pos.ptr<int32_t>();
  a.kv_len = args.kv_len.defined() ? args.kv_len.ptr<int32_t>() : nullptr;
  a.out = out.data();
  a.hq = sh.hq;
  a.hkv = sh.hkv;
  a.s = sh.s;
  a.kv_stride = sh.kv_stride;
  a.scale = args.scale;
  a.softcap = args.softcap;
  a.causal = args.causal ? 1 : 0;
  a.window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  if (dt == DType::BF16) return launch_t<__nv_bfloat16>(a, sh.d, static_cast<int>(group));
  return launch_t<__half>(a, sh.d, static_cast<int>(group));
}

}  // namespace mlxb::cuda
