// Flash attention for bf16/f16 prefill on tensor cores (WMMA 16x16x16, float32 accumulation).
// A block owns 64 query rows of one query head (4 warps x 16 rows) and walks the keys of its
// key/value head in tiles of 64: S = Q·K^T into shared memory, an online softmax per row (scale,
// soft-cap, slot-position mask), P in the input dtype, O += P·V with O kept in float32 shared
// memory. Tiles whose positions are all invisible to the block's queries are skipped (causal
// and sliding-window prefill touch only the band they need). Slot positions may be in any
// order (rotating caches), so skipping looks at positions, never at indices.
#include <mma.h>

#include "backend/cuda/attention.cuh"

namespace mlxb::cuda {

using namespace nvcuda;

constexpr int kBQ = 64, kBK = 64, kWarps = 4;
constexpr int kPadH = 8;   // halves of padding per row (keeps 32-byte fragment alignment)
constexpr int kPadF = 4;   // floats of padding per row

template <int D>
struct FlashSmem {
  static constexpr int ldh = D + kPadH;     // Q, K, V rows (input dtype)
  static constexpr int lds = kBK + kPadF;   // S rows (float)
  static constexpr int ldp = kBK + kPadH;   // P rows (input dtype)
  static constexpr int ldo = D + kPadF;     // O rows (float)
  static constexpr size_t q = 0;
  static constexpr size_t k = q + sizeof(uint16_t) * kBQ * ldh;
  static constexpr size_t v = k + sizeof(uint16_t) * kBK * ldh;
  static constexpr size_t s = v + sizeof(uint16_t) * kBK * ldh;
  static constexpr size_t p = s + sizeof(float) * kBQ * lds;
  static constexpr size_t o = p + sizeof(uint16_t) * kBQ * ldp;
  static constexpr size_t kp = o + sizeof(float) * kBQ * ldo;
  static constexpr size_t bytes = kp + sizeof(int) * kBK;
};

// Copies rows [r0, r0 + 64) of a [rows, D] matrix (row stride `stride` elements) into shared
// memory with 16-byte loads; rows past `rows` become zeros.
template <int D, typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t r0, int64_t rows, int64_t stride) {
  constexpr int vecs = D / 8;
  for (int i = threadIdx.x; i < kBQ * vecs; i += kWarps * 32) {
    int r = i / vecs, c = (i % vecs) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) val = *reinterpret_cast<const uint4*>(src + (r0 + r) * stride + c);
    *reinterpret_cast<uint4*>(dst + r * FlashSmem<D>::ldh + c) = val;
  }
}

template <int D, typename T>
static __global__ void __launch_bounds__(kWarps * 32)
    flash_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const int32_t* __restrict__ q_pos,
                 const int32_t* __restrict__ k_pos, AttnShape sh, float scale, float softcap, bool causal, int window,
                 T* __restrict__ out) {
  using L = FlashSmem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::q);
  T* ks = reinterpret_cast<T*>(smem + L::k);
  T* vs = reinterpret_cast<T*>(smem + L::v);
  float* ss = reinterpret_cast<float*>(smem + L::s);
  T* ps = reinterpret_cast<T*>(smem + L::p);
  float* os = reinterpret_cast<float*>(smem + L::o);
  int* kps = reinterpret_cast<int*>(smem + L::kp);

  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBQ;
  int64_t h = blockIdx.y;
  int64_t g = h / (sh.hq / sh.hkv);
  const T* kh = k + g * sh.kv_stride;
  const T* vh = v + g * sh.kv_stride;

  // Q tile: rows t0.. of head h (row stride hq * D in q).
  load_tile<D>(qs, q + h * D, t0, sh.t, sh.hq * D);
  for (int i = threadIdx.x; i < kBQ * L::ldo; i += kWarps * 32) os[i] = 0.0f;

  // Each row is owned by a lane pair: row = lane / 2 within the warp's 16, half = lane % 2.
  int my_row = warp * 16 + (lane >> 1);
  int half = lane & 1;
  bool row_valid = t0 + my_row < sh.t;
  int qp = row_valid ? q_pos[t0 + my_row] : INT32_MIN;
  // Range of the block's query positions, for tile skipping.
  int qmin = row_valid ? qp : INT32_MAX, qmax = row_valid ? qp : INT32_MIN;
  for (int o = 16; o > 0; o >>= 1) {
    qmin = min(qmin, __shfl_xor_sync(0xffffffffu, qmin, o));
    qmax = max(qmax, __shfl_xor_sync(0xffffffffu, qmax, o));
  }
  __shared__ int warp_qmin[kWarps], warp_qmax[kWarps];
  if (lane == 0) { warp_qmin[warp] = qmin; warp_qmax[warp] = qmax; }
  __syncthreads();
  qmin = INT32_MAX; qmax = INT32_MIN;
  for (int w = 0; w < kWarps; ++w) { qmin = min(qmin, warp_qmin[w]); qmax = max(qmax, warp_qmax[w]); }

  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qf[D / 16];
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) wmma::load_matrix_sync(qf[kd], qs + warp * 16 * L::ldh + kd * 16, L::ldh);

  float m = -INFINITY, l = 0.0f;
  float* srow = ss + my_row * L::lds + half * 32;
  T* prow = ps + my_row * L::ldp + half * 32;
  float* orow = os + my_row * L::ldo;

  for (int64_t j0 = 0; j0 < sh.s; j0 += kBK) {
    __syncthreads();  // previous tile's K/V/positions fully used
    for (int i = threadIdx.x; i < kBK; i += kWarps * 32) kps[i] = j0 + i < sh.s ? k_pos[j0 + i] : -1;
    __syncthreads();
    // Skip tiles with no key visible to any query of the block.
    bool any = false;
    for (int i = 0; i < kBK && !any; ++i) {
      int kp = kps[i];
      if (kp < 0) continue;
      if (causal && kp > qmax) continue;
      if (window > 0 && qmin - kp >= window) continue;
      any = true;
    }
    if (!any) continue;  // uniform across the block: every thread read the same positions
    load_tile<D>(ks, kh, j0, sh.s, D);
    load_tile<D>(vs, vh, j0, sh.s, D);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows x 64 keys.
#pragma unroll
    for (int c = 0; c < kBK / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, ks + c * 16 * L::ldh + kd * 16, L::ldh);
        wmma::mma_sync(acc, qf[kd], kf, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * L::lds + c * 16, acc, L::lds, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on this lane's 32 scores of its row.
    float sc[32];
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      int kp = kps[half * 32 + i];
      float s = row_valid && key_visible(kp, qp, causal, window) ? score_transform(srow[i], scale, softcap) : -INFINITY;
      sc[i] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    float m_new = fmaxf(m, tile_max);
    float m_use = m_new == -INFINITY ? 0.0f : m_new;
    float corr = expf(m - m_use);
    float psum = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      float p = expf(sc[i] - m_use);
      T pt = from_f32<T>(p);
      psum += to_f32(pt);
      prow[i] = pt;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l = l * corr + psum;
    m = m_new;
    for (int d = half; d < D; d += 2) orow[d] *= corr;
    __syncwarp();

    // O += P V for this warp's rows.
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* optr = os + warp * 16 * L::ldo + c * 16;
      wmma::load_matrix_sync(acc, optr, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, ps + warp * 16 * L::ldp + kk * 16, L::ldp);
        wmma::load_matrix_sync(vf, vs + kk * 16 * L::ldh + c * 16, L::ldh);
        wmma::mma_sync(acc, pf, vf, acc);
      }
      wmma::store_matrix_sync(optr, acc, L::ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (!row_valid) return;
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* dst = out + ((t0 + my_row) * sh.hq + h) * D;
  for (int d = half; d < D; d += 2) dst[d] = from_f32<T>(orow[d] * inv);
}

template <int D, typename T>
static void launch_flash(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                         const AttentionArgs& args, const AttnShape& sh, Tensor& out) {
  size_t bytes = FlashSmem<D>::bytes;
  static bool configured = false;  // per instantiation; the attribute is process-wide
  if (!configured) {
    MLXB_CUDA_OK(cudaFuncSetAttribute(flash_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    configured = true;
  }
  dim3 grid(static_cast<unsigned>(ceil_div(sh.t, kBQ)), static_cast<unsigned>(sh.hq));
  int window = static_cast<int>(std::min<int64_t>(args.window, INT32_MAX));
  flash_kernel<D, T><<<grid, kWarps * 32, bytes, stream()>>>(q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), q_pos.ptr<int32_t>(), k_pos.ptr<int32_t>(),
                                                          sh, args.scale, args.softcap, args.causal, window, out.ptr<T>());
  MLXB_CUDA_LAUNCHED("attention (flash)");
}

constexpr int64_t kFlashMinRows = 16;

bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                     const AttentionArgs& args, const AttnShape& sh, Tensor& out) {
  DType dt = q.dtype();
  if (sh.t < kFlashMinRows || (dt != DType::BF16 && dt != DType::F16) || k.dtype() != dt) return false;
  if (sh.hq > 65535) return false;
  if (flash_attention_mma(q, sh.hq * sh.d, k, v, q_pos, k_pos, args, sh, out)) return true;
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; };
  if (!aligned(q) || !aligned(k) || !aligned(v) || sh.kv_stride % 8 != 0) return false;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    size_t need = sh.d == 64 ? FlashSmem<64>::bytes : sh.d == 128 ? FlashSmem<128>::bytes : FlashSmem<256>::bytes;
    if (need > static_cast<size_t>(max_smem_optin())) return false;
    switch (sh.d) {
      case 64: launch_flash<64, T>(q, k, v, q_pos, k_pos, args, sh, out); return true;
      case 128: launch_flash<128, T>(q, k, v, q_pos, k_pos, args, sh, out); return true;
      case 256: launch_flash<256, T>(q, k, v, q_pos, k_pos, args, sh, out); return true;
      default: return false;
    }
  };
  return dt == DType::BF16 ? go(__nv_bfloat16{}) : go(__half{});
}

}  // namespace mlxb::cuda
