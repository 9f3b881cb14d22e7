// Host side of tma.cuh: tensor-map encoding through the runtime's driver entry point.
#include "backend/cuda/tma.cuh"

#include <cuda_runtime.h>

namespace mlxb::cuda {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

}  // namespace

bool encode_tma_2d_raw(CUtensorMap* map, const void* base, CUtensorMapDataType type, int elem_bytes, int64_t rows, int64_t cols,
                       int64_t ld_bytes, int box_rows, int box_cols, bool swizzle) {
  const EncodeTiled fn = encoder();
  const int64_t inner = static_cast<int64_t>(box_cols) * elem_bytes;
  if (!fn || (swizzle ? inner != 128 : inner % 16 != 0) || box_rows < 1 || box_rows > 256 || box_cols > 256 ||
      reinterpret_cast<uintptr_t>(base) % 16 != 0 || ld_bytes % 16 != 0 || rows < 1 || cols < 1)
    return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)}, estr[2] = {1, 1};
  return fn(map, type, 2, const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool encode_tma_2d(CUtensorMap* map, const void* base, bool bf16, int64_t rows, int64_t cols, int64_t ld, int box_rows, int box_cols) {
  return encode_tma_2d_raw(map, base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, rows, cols, ld * 2, box_rows,
                           box_cols, true);
}

}  // namespace mlxb::cuda
