// Flash attention for bf16/f16 prefill with register-resident tiles (mma.sync m16n8k16, float32
// accumulation). A block owns 64 rows of one key/value head: the rows are (token, query head of
// the group) pairs, so the query heads sharing a kv head (GQA) share every K/V tile the block
// loads. Four warps take 16 rows each; S = Q·K^T, the online softmax and O += P·V all stay in
// registers (the S accumulator is reused as the A operand of P·V). K/V tiles are loaded by
// cp.async into two stages, the next tile in flight while the current one is used. A prologue
// marks, per key tile, whether any key is visible to the block's queries (invisible tiles are
// never loaded: causal and sliding-window prefill walk only their band) and whether every key is
// visible to every query (no per-element mask there). Slot positions may be in any order
// (rotating caches): the marks look at positions, never at indices.
#include <cstdlib>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/smem_copy.cuh"

namespace mlxb::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRows = kWarps * 16;  // (token, head) rows per block
constexpr int kMaxTiles = 8192;     // key tiles the per-block marks cover
constexpr int kMarkWords = kMaxTiles / 32;

template <int D>
struct MmaLayout {
  static constexpr int bk = D == 256 ? 32 : 64;  // keys per tile
  static constexpr int ld = D + 8;                // halves per shared row: 16 bytes of pad, ldmatrix without conflicts
  static constexpr int tile = bk * ld;            // halves of one K or V tile
  static constexpr size_t q = 0;
  static constexpr size_t kv = q + sizeof(uint16_t) * kRows * ld;        // K0, V0, K1, V1
  static constexpr size_t marks = kv + sizeof(uint16_t) * 4 * tile;      // visible, full
  static constexpr size_t bytes = marks + sizeof(uint32_t) * 2 * kMarkWords;
};


// Two floats rounded to the input dtype in one register (lower half = a); `sum` gets the rounded
// values (the normalizer matches what P·V multiplies).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b, float& sum);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b, float& sum) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  float2 f = __bfloat1622float2(h);
  sum += f.x + f.y;
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b, float& sum) {
  __half2 h = __floats2half2_rn(a, b);
  float2 f = __half22float2(h);
  sum += f.x + f.y;
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T>
__device__ __forceinline__ void store2(T* p, float a, float b);
template <>
__device__ __forceinline__ void store2<__nv_bfloat16>(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
template <>
__device__ __forceinline__ void store2<__half>(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

struct MmaParams {
  int64_t q_stride;  // elements between tokens of q (hq * D when contiguous)
  int64_t kv_stride;
  int t, hq, group, s, ntiles;
  float scale_log2;  // scale * log2(e) without softcap, else scale
  float softcap;
  bool causal;
  int window;
};

// Next tile at or after `from` with a visible key, or -1. Every thread reads the same marks.
__device__ __forceinline__ int next_visible(const uint32_t* marks, int from, int ntiles) {
  for (int w = from >> 5; w < (ntiles + 31) >> 5; ++w) {
    uint32_t bits = marks[w];
    if (w == (from >> 5)) bits &= ~0u << (from & 31);
    if (bits) return (w << 5) + __ffs(bits) - 1;
  }
  return -1;
}

template <int D, typename T>
__global__ void __launch_bounds__(kWarps * 32, 2)
    flash_mma_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const int32_t* __restrict__ q_pos,
                     const int32_t* __restrict__ k_pos, MmaParams pr, T* __restrict__ out) {
  using L = MmaLayout<D>;
  constexpr int BK = L::bk, LD = L::ld;
  constexpr int NB = BK / 8;  // score n-blocks per warp row
  constexpr int OB = D / 8;   // output n-blocks
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::q);
  T* kvs = reinterpret_cast<T*>(smem + L::kv);
  uint32_t* vis_marks = reinterpret_cast<uint32_t*>(smem + L::marks);
  uint32_t* full_marks = vis_marks + kMarkWords;
  __shared__ int red_min[kWarps], red_max[kWarps];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t total_rows = static_cast<int64_t>(pr.t) * pr.group;
  // Row blocks in y, latest (longest: causal) first, kv heads in x: the first wave takes the
  // longest blocks of every head, and the shorter ones share the SMs with them.
  const int64_t row0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int g = blockIdx.x;
  const T* kh = k + g * pr.kv_stride;
  const T* vh = v + g * pr.kv_stride;

  // Q tile (cp.async, first group together with the first K/V tile).
  for (int i = threadIdx.x; i < kRows * (D / 8); i += kWarps * 32) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    const int64_t row = row0 + r;
    const bool ok = row < total_rows;
    const int64_t tok = ok ? row / pr.group : 0, head = ok ? static_cast<int64_t>(g) * pr.group + row % pr.group : 0;
    cp_async16(qs + r * LD + c, q + tok * pr.q_stride + head * D + c, ok ? 16 : 0);
  }

  // The block's query position range (valid rows only).
  int qmin = INT32_MAX, qmax = INT32_MIN;
  for (int r = threadIdx.x; r < kRows; r += kWarps * 32) {
    const int64_t row = row0 + r;
    if (row < total_rows) {
      const int qp = q_pos[row / pr.group];
      qmin = min(qmin, qp);
      qmax = max(qmax, qp);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    qmin = min(qmin, __shfl_xor_sync(0xffffffffu, qmin, o));
    qmax = max(qmax, __shfl_xor_sync(0xffffffffu, qmax, o));
  }
  if (lane == 0) { red_min[warp] = qmin; red_max[warp] = qmax; }
  for (int i = threadIdx.x; i < 2 * kMarkWords; i += kWarps * 32) vis_marks[i] = 0;
  __syncthreads();
  qmin = INT32_MAX; qmax = INT32_MIN;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) { qmin = min(qmin, red_min[w]); qmax = max(qmax, red_max[w]); }

  // Tile marks: a warp per tile, a lane per key.
  for (int tile = warp; tile < pr.ntiles; tile += kWarps) {
    bool any = false, all = true;
#pragma unroll
    for (int sub = 0; sub < BK / 32; ++sub) {
      const int j = tile * BK + sub * 32 + lane;
      const int kp = j < pr.s ? k_pos[j] : -1;
      any = any || (kp >= 0 && (!pr.causal || kp <= qmax) && (pr.window <= 0 || qmin - kp < pr.window));
      all = all && (kp >= 0 && (!pr.causal || kp <= qmin) && (pr.window <= 0 || qmax - kp < pr.window));
    }
    any = __any_sync(0xffffffffu, any);
    all = __all_sync(0xffffffffu, all);
    if (lane == 0) {
      if (any) atomicOr(&vis_marks[tile >> 5], 1u << (tile & 31));
      if (all) atomicOr(&full_marks[tile >> 5], 1u << (tile & 31));
    }
  }
  __syncthreads();

  auto load_kv = [&](int tile, int stage) {
    T* ks = kvs + (2 * stage) * L::tile;
    T* vs = ks + L::tile;
    const int j0 = tile * BK;
    for (int i = threadIdx.x; i < BK * (D / 8); i += kWarps * 32) {
      const int r = i / (D / 8), c = (i % (D / 8)) * 8;
      const bool ok = j0 + r < pr.s;
      const int64_t off = ok ? static_cast<int64_t>(j0 + r) * D + c : 0;
      cp_async16(ks + r * LD + c, kh + off, ok ? 16 : 0);
      cp_async16(vs + r * LD + c, vh + off, ok ? 16 : 0);
    }
  };

  // This thread's two rows (lane / 4 and lane / 4 + 8 of the warp's 16) and their positions.
  int qp[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + warp * 16 + (lane >> 2) + h * 8;
    qp[h] = row < total_rows ? q_pos[row / pr.group] : INT32_MIN;
  }

  float o[OB][4];
#pragma unroll
  for (int i = 0; i < OB; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  int cur = next_visible(vis_marks, 0, pr.ntiles);
  if (cur >= 0) load_kv(cur, 0);
  cp_async_commit();
  int stage = 0;
  while (cur >= 0) {
    const int nxt = next_visible(vis_marks, cur + 1, pr.ntiles);
    if (nxt >= 0) load_kv(nxt, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* ks = kvs + (2 * stage) * L::tile;
    const T* vs = ks + L::tile;

    // S = Q K^T: this warp's 16 rows x BK keys.
    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, qs + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816<T>(s[2 * np], a, b[0], b[1]);
        mma16816<T>(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Scores in the log2 domain, masked where the tile is not fully visible.
    const bool full = (full_marks[cur >> 5] >> (cur & 31)) & 1u;
    const int j0 = cur * BK;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nb][e];
        if (pr.softcap > 0.0f) x = pr.softcap * tanhf(x * pr.scale_log2 / pr.softcap) * 1.4426950408889634f;
        else x *= pr.scale_log2;
        if (!full) {
          const int j = j0 + nb * 8 + (lane & 3) * 2 + (e & 1);
          const int kp = j < pr.s ? k_pos[j] : -1;
          if (!key_visible(kp, qp[e >> 1], pr.causal, pr.window)) x = -INFINITY;
        }
        s[nb][e] = x;
      }

    // Online softmax for rows h = 0 (elements 0, 1) and h = 1 (elements 2, 3).
    float corr[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
      corr[h] = exp2f(m[h] - m_use[h]);
      m[h] = m_new;
    }
    uint32_t p[NB][2];
    float psum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      p[nb][0] = pack2<T>(exp2f(s[nb][0] - m_use[0]), exp2f(s[nb][1] - m_use[0]), psum[0]);
      p[nb][1] = pack2<T>(exp2f(s[nb][2] - m_use[1]), exp2f(s[nb][3] - m_use[1]), psum[1]);
    }
    l[0] = l[0] * corr[0] + psum[0];
    l[1] = l[1] * corr[1] + psum[1];
#pragma unroll
    for (int i = 0; i < OB; ++i) {
      o[i][0] *= corr[0]; o[i][1] *= corr[0];
      o[i][2] *= corr[1]; o[i][3] *= corr[1];
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const uint32_t a[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dp * 16 + (lane >> 4) * 8);
        mma16816<T>(o[2 * dp], a, b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
    stage ^= 1;
    cur = nxt;
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int64_t row = row0 + warp * 16 + (lane >> 2) + h * 8;
    if (row >= total_rows) continue;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    const int64_t tok = row / pr.group, head = static_cast<int64_t>(g) * pr.group + row % pr.group;
    T* dst = out + (tok * pr.hq + head) * D + (lane & 3) * 2;
#pragma unroll
    for (int nb = 0; nb < OB; ++nb) store2<T>(dst + nb * 8, o[nb][2 * h] * inv, o[nb][2 * h + 1] * inv);
  }
}

template <int D, typename T>
void launch(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos, const MmaParams& pr,
            int64_t hkv, Tensor& out) {
  constexpr size_t bytes = MmaLayout<D>::bytes;
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(flash_mma_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    configured = true;
  }
  const int64_t blocks = ceil_div(static_cast<int64_t>(pr.t) * pr.group, kRows);
  dim3 grid(static_cast<unsigned>(hkv), static_cast<unsigned>(blocks));
  flash_mma_kernel<D, T><<<grid, kWarps * 32, bytes, stream()>>>(q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), q_pos.ptr<int32_t>(),
                                                                 k_pos.ptr<int32_t>(), pr, out.ptr<T>());
  MLXB_CUDA_LAUNCHED("attention (flash mma)");
}

bool mma_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("MLXB_FLASH_MMA");
    return !(e && e[0] == '0');
  }();
  return on;
}

}  // namespace

bool flash_attention_mma(const Tensor& q, int64_t q_stride, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const AttentionArgs& args, const AttnShape& sh, Tensor& out) {
  if (!mma_enabled()) return false;
  const DType dt = q.dtype();
  if ((dt != DType::BF16 && dt != DType::F16) || k.dtype() != dt || v.dtype() != dt || out.dtype() != dt) return false;
  if (sh.d != 64 && sh.d != 128 && sh.d != 256) return false;
  const int64_t bk = sh.d == 256 ? 32 : 64;
  const int64_t ntiles = ceil_div(sh.s, bk);
  const int64_t group = sh.hq / sh.hkv;
  if (ntiles > kMaxTiles || sh.t > INT32_MAX / group || sh.hkv > INT32_MAX || ceil_div(sh.t * group, kRows) > 65535) return false;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(q.data()) || !aligned(k.data()) || !aligned(v.data()) || !aligned(out.data()) || sh.kv_stride % 8 != 0 ||
      q_stride % 8 != 0)
    return false;
  size_t need = sh.d == 64 ? MmaLayout<64>::bytes : sh.d == 128 ? MmaLayout<128>::bytes : MmaLayout<256>::bytes;
  if (need > static_cast<size_t>(max_smem_optin())) return false;
  MmaParams pr;
  pr.q_stride = q_stride;
  pr.kv_stride = sh.kv_stride;
  pr.t = static_cast<int>(sh.t);
  pr.hq = static_cast<int>(sh.hq);
  pr.group = static_cast<int>(group);
  pr.s = static_cast<int>(sh.s);
  pr.ntiles = static_cast<int>(ntiles);
  pr.softcap = args.softcap;
  pr.scale_log2 = args.softcap > 0.0f ? args.scale : args.scale * 1.4426950408889634f;
  pr.causal = args.causal;
  pr.window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  auto go = [&](auto tag) {
    using T = decltype(tag);
    switch (sh.d) {
      case 64: launch<64, T>(q, k, v, q_pos, k_pos, pr, sh.hkv, out); break;
      case 128: launch<128, T>(q, k, v, q_pos, k_pos, pr, sh.hkv, out); break;
      default: launch<256, T>(q, k, v, q_pos, k_pos, pr, sh.hkv, out); break;
    }
  };
  if (dt == DType::BF16) go(__nv_bfloat16{});
  else go(__half{});
  return true;
}

}  // namespace mlxb::cuda
