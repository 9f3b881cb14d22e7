// Internal to the CUDA backend's quantized ops (qmatmul.cu, qgemv_*.cu, qembedding.cu): the MLX
// affine layout seen in chunks of 32 values. A row of b-bit values is one little-endian bit
// stream over its uint32 words (see quant/affine.h), so 32 consecutive values of a row are
// exactly `b` whole words, and K (a multiple of the group size, itself >= 32) holds K / 32 chunks.
// A chunk never straddles a group: one scale and one bias per chunk.
#pragma once
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "ops/ops.h"

namespace mlxb::cuda::qmm {

// Scale / bias / linear-bias storage codes passed to kernels (one code per call, uniform branch).
enum : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
inline int code_of(DType d) { return d == DType::F32 ? kF32 : d == DType::BF16 ? kBF16 : kF16; }

__device__ __forceinline__ float load_f(const void* p, int code, int64_t i) {
  if (code == kF32) return __ldg(static_cast<const float*>(p) + i);
  unsigned short u = __ldg(static_cast<const unsigned short*>(p) + i);
  if (code == kBF16) return __uint_as_float(static_cast<uint32_t>(u) << 16);
  return __half2float(__ushort_as_half(u));
}

// Byte alignment the chunk loader needs for a chunk of `bits` words (every chunk of an aligned
// base is aligned: a chunk is `bits` words).
inline int chunk_align(int bits) { return bits == 4 || bits == 8 ? 16 : bits == 2 || bits == 6 ? 8 : 4; }

// The `B` words of one chunk, with the widest loads its alignment allows.
template <int B>
__device__ __forceinline__ void load_chunk(const uint32_t* p, uint32_t (&w)[B]) {
  if constexpr (B % 4 == 0) {
#pragma unroll
    for (int i = 0; i < B / 4; ++i) {
      uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
  } else if constexpr (B % 2 == 0) {
#pragma unroll
    for (int i = 0; i < B / 2; ++i) {
      uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x; w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < B; ++i) w[i] = __ldg(p + i);
  }
}

// Value j (0..31) of a chunk; j is a compile-time constant after unrolling, so this folds into a
// shift and a mask (two shifts and an or when the value straddles two words).
template <int B>
__device__ __forceinline__ uint32_t field(const uint32_t (&w)[B], int j) {
  const int bit = j * B, wi = bit >> 5, sh = bit & 31;
  uint32_t v = w[wi] >> sh;
  if (sh + B > 32) v |= w[wi + 1] << (32 - sh);
  return v & ((1u << B) - 1u);
}

// The 32 integers of a chunk as exact floats. 2/4/8 bits: two values at once through half2
// (0x6400 | q is the half 1024 + q, exact below 1024), one subtraction per pair; other widths:
// the float 2^23 + q built by bits, minus 2^23.
template <int B>
__device__ __forceinline__ void unpack_chunk(const uint32_t (&w)[B], float (&q)[32]) {
  if constexpr (B == 2 || B == 4 || B == 8) {
    constexpr int per_half = 16 / B;  // values of one word in each 16-bit half
    constexpr uint32_t mask = ((1u << B) - 1u) * 0x00010001u;
    const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400));
#pragma unroll
    for (int wi = 0; wi < B; ++wi) {
#pragma unroll
      for (int k = 0; k < per_half; ++k) {
        uint32_t t = ((w[wi] >> (B * k)) & mask) | 0x64006400u;
        __half2 h = __hsub2(*reinterpret_cast<__half2*>(&t), k1024);
        float2 f = __half22float2(h);
        q[wi * (32 / B) + k] = f.x;
        q[wi * (32 / B) + k + per_half] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) q[j] = __uint_as_float(0x4B000000u | field<B>(w, j)) - 8388608.0f;
  }
}

// The format's formula, rounded twice (no fused multiply-add), as the CPU reference computes it.
__device__ __forceinline__ float dequant_exact(float s, float q, float b) { return __fadd_rn(__fmul_rn(s, q), b); }

// 32 consecutive elements as floats from a 16-byte aligned address.
template <typename T>
__device__ __forceinline__ void load32(const T* p, float (&v)[32]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) load8(p + 8 * i, v + 8 * i);
}

__device__ __forceinline__ unsigned short bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ unsigned short bits16(__half v) { return __half_as_ushort(v); }

// 32 floats stored as T at a 16-byte aligned address.
template <typename T>
__device__ __forceinline__ void store32(T* p, const float (&v)[32]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 8; ++i) reinterpret_cast<float4*>(p)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 u;
      uint32_t* o = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        o[j] = static_cast<uint32_t>(bits16(from_f32<T>(v[8 * i + 2 * j]))) |
               (static_cast<uint32_t>(bits16(from_f32<T>(v[8 * i + 2 * j + 1]))) << 16);
      }
      reinterpret_cast<uint4*>(p)[i] = u;
    }
  }
}

// One quantized matmul call as the kernels see it (y[M, N] = x[M, K] · dequant(w)^T + bias).
struct Params {
  const void* x = nullptr;
  void* y = nullptr;
  const uint32_t* packed = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  const void* bias = nullptr;  // optional linear bias [N]
  int sb_code = kF32;          // scales / biases storage
  int bias_code = kF32;
  int group_size = 64;
  int64_t M = 0, N = 0, K = 0;
  // The fused one-row ops (qgemv_fused.cu; qgemv_tcp only): with norm_w, x is first normalised as
  // rms_norm(x, norm_w, eps, add_one) would (norm_w of x's dtype); with add, y += the rounded
  // result (y is the residual) instead of y = it.
  const void* norm_w = nullptr;
  float eps = 0.0f;
  bool add_one = false;
  bool add = false;
};

// The GEMV's parameters for x [m, K] · w^T into y (w's packed data at `packed`).
inline Params gemv_params(const Tensor& x, const QuantWeight& w, const Tensor& packed, const Tensor* bias, const Tensor& y, int64_t m) {
  Params p;
  p.x = x.data();
  p.y = y.data();
  p.packed = packed.ptr<uint32_t>();
  p.scales = w.scales.data();
  p.biases = w.biases.data();
  p.sb_code = code_of(w.scales.dtype());
  p.bias = bias ? bias->data() : nullptr;
  p.bias_code = bias ? code_of(bias->dtype()) : kF32;
  p.group_size = w.group_size;
  p.M = m;
  p.N = w.rows;
  p.K = w.cols;
  return p;
}

// GEMV for M <= 8 (decode): per bit width, x/y of dtype `xd`. Defined in qgemv_*.cu.
void qgemv_b2(const Params& p, DType xd);
void qgemv_b3(const Params& p, DType xd);
void qgemv_b4(const Params& p, DType xd);
void qgemv_b5(const Params& p, DType xd);
void qgemv_b6(const Params& p, DType xd);
void qgemv_b8(const Params& p, DType xd);

// 4-bit weights with bf16/f16 activations on the tensor cores (qgemv_tc.cu): whether p fits it
// (bits, dtype, M <= 8, group size, 16-byte aligned packed words and x), the plain GEMV, and the
// gated one (p.N = F outputs per row, weight [gate; up] of 2F rows, bias [2F] optional).
bool qgemv_tc_fits(const Params& p, int bits, DType xd);
// MLXB_QGEMV_VARIANT (for kernel timings; read at each launch): 0 or unset, the default; 1, the
// tensor-core GEMV without shared-memory staging; 2, the CUDA-core GEMV of qgemv.cuh; 3-6 (bf16,
// group size 64 only) staging with more bytes in flight: 128-byte row pieces x 5 stages, 512 x 2,
// 512 x 3, 256 x 4; 7, qgemv_tcf.cu (the staged kernel with its per-group overhead removed);
// 8, qgemv_tcp.cu (M = 1: x, scales and biases in the cp.async pipeline) with 2 stages and x
// permuted in registers; 9, with 3 stages (x paired in shared memory, as the default);
// 11, the default's qgemv_tcp with K split for half as many warps;
// 10, the staged kernel of qgemv_tc.cu (the default before qgemv_tcf); 12, qgemv_tma.cu alone
// (without MLXB_QGEMV_TMA=1); 13, qgemv_tcp's default configuration; 14, qgemv_row.cu alone (without
// MLXB_QGEMV_ROW=1). The default runs qgemv_row where it fits and is on, then qgemv_tma where it
// fits and MLXB_QGEMV_TMA=1, else qgemv_tcp
// (2 stages) for M = 1, else qgemv_tcf, else the kernels of qgemv_tc.cu.
// The default qgemv_tcp is launched programmatically (its first weights requested before the
// previous kernel ends; MLXB_QGEMV_PDL=0 / =4096 turn that off / limit it to K >= 4096; see
// qgemv_tcp.cu).
int gemv_variant();
// qgemv_tcf.cu: runs the GEMV (gated: p.N = F, as qgated_tc_b4) and returns true when p fits it
// (what qgemv_tc_fits checks, plus 16-bit scales, group size 64 or 128, whole stages per row).
bool qgemv_tcf(const Params& p, DType xd, bool gated, Activation act);
// qgemv_tcp.cu: the same for M = 1 (stages: 2 or 3 per warp; fewer_splits: K split for ~16
// instead of ~32 warps per SM; pair_x: x paired once per stage in shared memory, always with 3
// stages); false when p does not fit it (p.norm_w: only the default configuration, 2 stages with
// pair_x, and K <= kTcpMaxNormK).
bool qgemv_tcp(const Params& p, DType xd, bool gated, Activation act, int stages, bool fewer_splits, bool pair_x);
// qgemv_tma.cu: the same for M = 1 on sm_90+ with weights, scales and biases streamed by 2-D tensor
// copies (group size 64, 16-bit scales, K a multiple of 512 up to kMaxK = 16384; p.norm_w and p.add
// as qgemv_tcp). Opt-in, MLXB_QGEMV_TMA=1 (or `forced`).
bool qgemv_tma(const Params& p, DType xd, bool gated, Activation act, bool forced);
// qgemv_row.cu: the same for M = 1 with each weight row streamed in contiguous runs straight into
// registers (group size 64 or 128, 16-bit scales, K a multiple of 8 groups up to 16384; p.norm_w
// and p.add as qgemv_tcp). On with MLXB_QGEMV_ROW=1 (or `forced`).
bool qgemv_row(const Params& p, DType xd, bool gated, Activation act, bool forced);
// The default one-row path of the fused ops: qgemv_row, else qgemv_tma, else qgemv_tcp's default
// configuration.
bool qgemv_one_row(const Params& p, DType xd, bool gated, Activation act);
void qgemv_tc_b4(const Params& p, DType xd);
void qgated_tc_b4(const Params& p, DType xd, Activation act);

constexpr int64_t kGemvMaxRows = 8;
constexpr int64_t kTcpMaxNormK = 16384;  // x staged per block for p.norm_w (2-byte values, 32 KB)

}  // namespace mlxb::cuda::qmm
