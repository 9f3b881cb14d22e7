// out[T,H] = dequant(table)[ids[t], :] * scale for an MLX affine-quantized table. Bit-exact with
// the CPU reference: scale * q + bias rounded twice, then one float32 multiply by `scale` when it
// is not 1, then one rounding to out's dtype. ids are int32 on the device; an id outside the table
// writes a zero row (as the dense CUDA embedding; the facade validates ids before a graph runs).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/qmm.cuh"
#include "quant/affine.h"

namespace mlxb::cuda {
namespace qmm {

// One block per token, one thread per chunk of 32 values of its row.
template <int B, typename TO>
static __global__ void qembedding_kernel(const uint32_t* __restrict__ packed, const void* scales, const void* biases, int sb_code,
                                         const int32_t* __restrict__ ids, TO* __restrict__ out, int64_t vocab, int64_t hidden,
                                         int group_size, float scale) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  const int64_t cpr = hidden / 32, groups = hidden / group_size;
  for (int64_t c = threadIdx.x; c < cpr; c += blockDim.x) {
    float q[32];
    if (ok) {
      uint32_t w[B];
      load_chunk<B>(packed + id * (cpr * B) + c * B, w);
      const int64_t g = id * groups + c * 32 / group_size;
      const float s = load_f(scales, sb_code, g), b = load_f(biases, sb_code, g);
      unpack_chunk<B>(w, q);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        q[j] = dequant_exact(s, q[j], b);
        if (scale != 1.0f) q[j] = __fmul_rn(q[j], scale);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) q[j] = 0.0f;
    }
    store32(out + t * hidden + c * 32, q);
  }
}

template <typename TO>
static void qembedding_typed(const QuantWeight& table, const uint32_t* packed, const Tensor& ids, float scale, Tensor& out) {
  const unsigned grid = static_cast<unsigned>(ids.numel());
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, (table.cols / 32 + 31) / 32 * 32)));
  const int sb = code_of(table.scales.dtype());
  switch (table.bits) {
#define MLXB_QE(BITS)                                                                                                      \
  case BITS:                                                                                                              \
    qembedding_kernel<BITS, TO><<<grid, threads, 0, stream()>>>(packed, table.scales.data(), table.biases.data(), sb,      \
                                                                ids.ptr<int32_t>(), out.ptr<TO>(), table.rows, table.cols, \
                                                                table.group_size, scale);                                  \
    break;
    MLXB_QE(2) MLXB_QE(3) MLXB_QE(4) MLXB_QE(5) MLXB_QE(6) MLXB_QE(8)
#undef MLXB_QE
    default: fail(ErrorCode::kUnsupported, "cuda qembedding: unsupported bits " + std::to_string(table.bits));
  }
  MLXB_CUDA_LAUNCHED("qembedding");
}

}  // namespace qmm

void CudaBackend::qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out) {
  quant::validate(table, "qembedding table");
  check_device(table.packed, "qembedding", "packed table"); check_device(table.scales, "qembedding", "scales");
  check_device(table.biases, "qembedding", "biases");
  check_device(ids, "qembedding", "ids"); check_device(out, "qembedding", "out");
  check_contiguous(ids, "qembedding", "ids"); check_contiguous(out, "qembedding", "out");
  check_float(out, "qembedding", "out");
  if (ids.dtype() != DType::I32) fail(ErrorCode::kInvalidArgument, "cuda qembedding: ids must be int32, got " + ids.describe());
  const int64_t t = ids.numel(), h = table.cols;
  if (out.numel() != t * h || out.dim(-1) != h)
    fail(ErrorCode::kInvalidArgument, "cuda qembedding: out " + out.describe() + " is not [" + std::to_string(t) + ", " + std::to_string(h) + "]");
  if (t == 0) return;
  if (t > INT32_MAX) fail(ErrorCode::kInvalidArgument, "cuda qembedding: too many ids");
  Tensor packed = table.packed;
  if (reinterpret_cast<uintptr_t>(packed.data()) % qmm::chunk_align(table.bits) != 0) {
    packed = Tensor::empty(table.packed.shape(), DType::U32, Device::kCUDA);
    copy(packed.data(), Device::kCUDA, table.packed.data(), Device::kCUDA, table.packed.nbytes());
  }
  if (reinterpret_cast<uintptr_t>(out.data()) % 16 != 0)
    fail(ErrorCode::kInvalidArgument, "cuda qembedding: out must be 16-byte aligned (" + out.describe() + ")");
  MLXB_FLOAT_SWITCH(out.dtype(), TO, qmm::qembedding_typed<TO>(table, packed.ptr<uint32_t>(), ids, scale, out));
}

}  // namespace mlxb::cuda
