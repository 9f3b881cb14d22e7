// y[M,N] = x[M,K] · dequant(w)[N,K]^T (+ bias[N]) for MLX affine-quantized weights, float32
// accumulation, y in x's dtype.
// - M <= 8 (decode): the GEMV of qgemv.cuh, unpacking in registers (qgemv_b*.cu per bit width).
// - larger M (prefill): the weight is dequantized by the format's formula into a scratch matrix
//   of x's dtype (bf16 for bf16 activations), then the dense matmul (cuBLASLt) runs on it; the
//   scratch comes from the caching allocator and is released after the call.
// Packed weights whose base address is not aligned for the chunk loads (never the case for
// weights loaded from a file; possible for hand-made views) are first copied to aligned memory.
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/qmm.cuh"
#include "quant/affine.h"

namespace mlxb::cuda {
namespace qmm {

// One thread per chunk of 32 values: out[n, k] = scale * q + bias (rounded as the CPU reference).
// Index arithmetic in 32 bits when the chunk count allows it (a 64-bit division per chunk
// costs more than the chunk's unpacking).
template <int B, typename TD, typename I>
static __global__ void dequant_kernel(const uint32_t* __restrict__ packed, const void* scales, const void* biases, int sb_code,
                                      TD* __restrict__ out, int64_t rows, int64_t k_count, int group_size) {
  const I cpr = static_cast<I>(k_count / 32), total = static_cast<I>(rows) * cpr, groups = static_cast<I>(k_count / group_size);
  const I cpg = static_cast<I>(group_size / 32);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I n = i / cpr, c = i - n * cpr;
    uint32_t w[B];
    load_chunk<B>(packed + static_cast<int64_t>(i) * B, w);
    const int64_t g = static_cast<int64_t>(n) * groups + c / cpg;
    const float s = load_f(scales, sb_code, g), b = load_f(biases, sb_code, g);
    float q[32];
    unpack_chunk<B>(w, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) q[j] = dequant_exact(s, q[j], b);
    store32(out + static_cast<int64_t>(i) * 32, q);
  }
}

template <typename TD>
static void dequant_typed(const QuantWeight& w, const uint32_t* packed, int sb_code, TD* out) {
  const int64_t chunks = w.rows * (w.cols / 32);
  const unsigned grid = grid_for(chunks);
  const bool small = chunks + static_cast<int64_t>(grid) * 256 < (int64_t(1) << 32);
  switch (w.bits) {
#define MLXB_DQ(BITS)                                                                                                      \
  case BITS:                                                                                                              \
    if (small)                                                                                                            \
      dequant_kernel<BITS, TD, uint32_t><<<grid, 256, 0, stream()>>>(packed, w.scales.data(), w.biases.data(), sb_code, out, \
                                                                     w.rows, w.cols, w.group_size);                        \
    else                                                                                                                  \
      dequant_kernel<BITS, TD, int64_t><<<grid, 256, 0, stream()>>>(packed, w.scales.data(), w.biases.data(), sb_code, out,  \
                                                                    w.rows, w.cols, w.group_size);                         \
    break;
    MLXB_DQ(2) MLXB_DQ(3) MLXB_DQ(4) MLXB_DQ(5) MLXB_DQ(6) MLXB_DQ(8)
#undef MLXB_DQ
    default: fail(ErrorCode::kUnsupported, "cuda qmatmul: unsupported bits " + std::to_string(w.bits));
  }
  MLXB_CUDA_LAUNCHED("qmatmul (dequantize)");
}

// 4-bit weights into 16-bit storage, one packed word (8 values, 16 output bytes) per thread and
// step, a block per row at a time: each warp instruction reads 128 contiguous bytes and writes
// 512, no index division. Same roundings as dequant_kernel.
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16, float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(__half, float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <typename TD>
static __global__ void dequant4_kernel(const uint32_t* __restrict__ packed, const void* scales, const void* biases, int sb_code,
                                       TD* __restrict__ out, int64_t rows, int words_per_row, int group_shift, int64_t groups) {
  const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400));
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const uint32_t* src = packed + n * words_per_row;
    uint4* dst = reinterpret_cast<uint4*>(out + n * words_per_row * 8);
    for (int w = threadIdx.x; w < words_per_row; w += blockDim.x) {
      const uint32_t word = __ldg(src + w);
      const int64_t g = n * groups + (w >> group_shift);
      const float s = load_f(scales, sb_code, g), b = load_f(biases, sb_code, g);
      float v[8];
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // values k and k + 4 of the word from one half2
        uint32_t t = ((word >> (4 * k)) & 0x000F000Fu) | 0x64006400u;
        const float2 f = __half22float2(__hsub2(*reinterpret_cast<__half2*>(&t), k1024));
        v[k] = dequant_exact(s, f.x, b);
        v[k + 4] = dequant_exact(s, f.y, b);
      }
      TD tag{};
      dst[w] = make_uint4(pack2(tag, v[0], v[1]), pack2(tag, v[2], v[3]), pack2(tag, v[4], v[5]), pack2(tag, v[6], v[7]));
    }
  }
}

template <typename TY>
static __global__ void add_bias_kernel(TY* y, const void* bias, int bias_code, int64_t rows, int64_t n) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_f32<TY>(to_f32(y[i]) + load_f(bias, bias_code, i % n));
}

}  // namespace qmm

// Dequantizes w into `out` (a contiguous [N, K] float tensor on the device). `packed` is w's
// packed data at an address aligned for the chunk loads.
static void dequantize_to(const QuantWeight& w, const uint32_t* packed, Tensor& out) {
  const int sb = qmm::code_of(w.scales.dtype());
  if (w.bits == 4 && (out.dtype() == DType::BF16 || out.dtype() == DType::F16) && w.cols / 8 <= INT32_MAX) {
    const int wpr = static_cast<int>(w.cols / 8);
    const int shift = w.group_size == 32 ? 2 : w.group_size == 64 ? 3 : 4;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(w.rows, static_cast<int64_t>(sm_count()) * 16));
    const int threads = wpr >= 256 ? 256 : 128;
    if (out.dtype() == DType::BF16)
      qmm::dequant4_kernel<__nv_bfloat16><<<grid, threads, 0, stream()>>>(packed, w.scales.data(), w.biases.data(), sb,
                                                                       out.ptr<__nv_bfloat16>(), w.rows, wpr, shift, w.cols / w.group_size);
    else
      qmm::dequant4_kernel<__half><<<grid, threads, 0, stream()>>>(packed, w.scales.data(), w.biases.data(), sb, out.ptr<__half>(), w.rows,
                                                                wpr, shift, w.cols / w.group_size);
    MLXB_CUDA_LAUNCHED("qmatmul (dequantize 4-bit)");
    return;
  }
  MLXB_FLOAT_SWITCH(out.dtype(), TD, qmm::dequant_typed<TD>(w, packed, sb, out.ptr<TD>()));
}

void CudaBackend::qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  quant::validate(w, "qmatmul weight");
  check_device(x, "qmatmul", "x"); check_device(y, "qmatmul", "y");
  check_float(x, "qmatmul", "x"); check_float(y, "qmatmul", "y");
  check_contiguous(x, "qmatmul", "x"); check_contiguous(y, "qmatmul", "y");
  check_device(w.packed, "qmatmul", "packed weight"); check_device(w.scales, "qmatmul", "scales");
  check_device(w.biases, "qmatmul", "biases");
  const int64_t n = w.rows, k = w.cols;
  if (x.ndim() < 1 || x.dim(-1) != k)
    fail(ErrorCode::kInvalidArgument, "cuda qmatmul: x " + x.describe() + " does not have " + std::to_string(k) + " columns");
  const int64_t m = x.numel() / k;
  if (y.numel() != m * n || y.dim(-1) != n)
    fail(ErrorCode::kInvalidArgument, "cuda qmatmul: y " + y.describe() + " is not [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  if (y.dtype() != x.dtype())
    fail(ErrorCode::kUnsupported, "cuda qmatmul: y must have x's dtype (" + x.describe() + " -> " + y.describe() + ")");
  if (bias) {
    check_device(*bias, "qmatmul", "bias"); check_float(*bias, "qmatmul", "bias"); check_contiguous(*bias, "qmatmul", "bias");
    if (bias->numel() != n) fail(ErrorCode::kInvalidArgument, "cuda qmatmul: bias must be [" + std::to_string(n) + "], got " + bias->describe());
  }
  if (m == 0) return;

  // Chunk loads need the packed base aligned to the chunk's vector width.
  Tensor packed = w.packed;
  if (reinterpret_cast<uintptr_t>(packed.data()) % qmm::chunk_align(w.bits) != 0) {
    packed = Tensor::empty(w.packed.shape(), DType::U32, Device::kCUDA);
    copy(packed.data(), Device::kCUDA, w.packed.data(), Device::kCUDA, w.packed.nbytes());
  }

  if (m <= qmm::kGemvMaxRows) {
    Tensor xa = x;
    if (reinterpret_cast<uintptr_t>(x.data()) % 16 != 0) {  // load32 needs 16-byte aligned rows
      xa = Tensor::empty(x.shape(), x.dtype(), Device::kCUDA);
      copy(xa.data(), Device::kCUDA, x.data(), Device::kCUDA, x.nbytes());
    }
    const qmm::Params p = qmm::gemv_params(xa, w, packed, bias, y, m);
    if (qmm::qgemv_tc_fits(p, w.bits, x.dtype())) {
      qmm::qgemv_tc_b4(p, x.dtype());
      return;
    }
    switch (w.bits) {
      case 2: qmm::qgemv_b2(p, x.dtype()); break;
      case 3: qmm::qgemv_b3(p, x.dtype()); break;
      case 4: qmm::qgemv_b4(p, x.dtype()); break;
      case 5: qmm::qgemv_b5(p, x.dtype()); break;
      case 6: qmm::qgemv_b6(p, x.dtype()); break;
      default: qmm::qgemv_b8(p, x.dtype()); break;
    }
    return;
  }

  // Prefill: dense weight in x's dtype, then the dense path (cuBLASLt when available).
  Tensor dense = Tensor::empty({n, k}, x.dtype(), Device::kCUDA);
  dequantize_to(w, packed.ptr<uint32_t>(), dense);
  matmul(x, dense, nullptr, y);
  if (bias) {
    const int bc = qmm::code_of(bias->dtype());
    MLXB_FLOAT_SWITCH(y.dtype(), TY,
        qmm::add_bias_kernel<TY><<<grid_for(m * n), 256, 0, stream()>>>(y.ptr<TY>(), bias->data(), bc, m, n));
    MLXB_CUDA_LAUNCHED("qmatmul (bias)");
  }
}

// act(x·gate^T) * (x·up^T) for a fused [gate; up] quantized weight: one tensor-core GEMV launch
// for up to 8 rows of 4-bit weights with bf16/f16 activations, otherwise the generic two
// qmatmuls and gated_act (the same roundings either way: gate and up to out's dtype first).
void CudaBackend::qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out) {
  const bool shapes = w.rows % 2 == 0 && x.ndim() >= 1 && x.dim(-1) == w.cols && out.ndim() >= 1 && out.dim(-1) * 2 == w.rows &&
                      out.numel() / out.dim(-1) == x.numel() / w.cols;
  const bool fits = shapes && x.device() == Device::kCUDA && out.device() == Device::kCUDA && w.packed.device() == Device::kCUDA &&
                    x.is_contiguous() && out.is_contiguous() && w.packed.is_contiguous() && w.scales.is_contiguous() &&
                    w.biases.is_contiguous() && x.dtype() == out.dtype() &&
                    (!bias || (bias->device() == Device::kCUDA && bias->is_contiguous() && bias->numel() == w.rows &&
                               (bias->dtype() == DType::F32 || bias->dtype() == DType::BF16 || bias->dtype() == DType::F16)));
  if (fits) {
    quant::validate(w, "qgated_matmul weight");
    const int64_t m = x.numel() / w.cols;
    qmm::Params p = qmm::gemv_params(x, w, w.packed, bias, out, m);
    p.N = w.rows / 2;
    if (m > 0 && qmm::qgemv_tc_fits(p, w.bits, x.dtype())) {
      qmm::qgated_tc_b4(p, x.dtype(), act);
      return;
    }
  }
  Backend::qgated_matmul(x, w, bias, act, out);
}

}  // namespace mlxb::cuda
