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
template <int B, typename TD>
static __global__ void dequant_kernel(const uint32_t* __restrict__ packed, const void* scales, const void* biases, int sb_code,
                                      TD* __restrict__ out, int64_t rows, int64_t k_count, int group_size) {
  const int64_t cpr = k_count / 32, total = rows * cpr, groups = k_count / group_size;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / cpr, c = i % cpr;
    uint32_t w[B];
    load_chunk<B>(packed + n * (cpr * B) + c * B, w);
    const int64_t g = n * groups + c * 32 / group_size;
    const float s = load_f(scales, sb_code, g), b = load_f(biases, sb_code, g);
    float q[32];
    unpack_chunk<B>(w, q);
#pragma unroll
    for (int j = 0; j < 32; ++j) q[j] = dequant_exact(s, q[j], b);
    store32(out + n * k_count + c * 32, q);
  }
}

template <typename TD>
static void dequant_typed(const QuantWeight& w, const uint32_t* packed, int sb_code, TD* out) {
  const unsigned grid = grid_for(w.rows * (w.cols / 32));
  switch (w.bits) {
#define MLXB_DQ(BITS)                                                                                                     \
  case BITS:                                                                                                             \
    dequant_kernel<BITS, TD><<<grid, 256, 0, stream()>>>(packed, w.scales.data(), w.biases.data(), sb_code, out, w.rows, \
                                                         w.cols, w.group_size);                                           \
    break;
    MLXB_DQ(2) MLXB_DQ(3) MLXB_DQ(4) MLXB_DQ(5) MLXB_DQ(6) MLXB_DQ(8)
#undef MLXB_DQ
    default: fail(ErrorCode::kUnsupported, "cuda qmatmul: unsupported bits " + std::to_string(w.bits));
  }
  MLXB_CUDA_LAUNCHED("qmatmul (dequantize)");
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
    qmm::Params p;
    p.x = xa.data();
    p.y = y.data();
    p.packed = packed.ptr<uint32_t>();
    p.scales = w.scales.data();
    p.biases = w.biases.data();
    p.sb_code = qmm::code_of(w.scales.dtype());
    p.bias = bias ? bias->data() : nullptr;
    p.bias_code = bias ? qmm::code_of(bias->dtype()) : qmm::kF32;
    p.group_size = w.group_size;
    p.M = m;
    p.N = n;
    p.K = k;
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

}  // namespace mlxb::cuda
