// out[T,H] = table[ids[t], :] * scale. ids are int32 on the device; an id outside the table
// writes a zero row (the facade validates ids before they reach a graph).
#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <typename TT, typename TO>
static __global__ void embedding_kernel(const TT* __restrict__ table, const int32_t* __restrict__ ids, TO* __restrict__ out,
                                        int64_t vocab, int64_t hidden,
                                        float scale) {
  int64_t t = blockIdx.x;
  int64_t id = ids[t];
  bool ok = id >= 0 && id < vocab;
  const TT* row = table + (ok ? id : 0) * hidden;
  TO* dst = out + t * hidden;
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = from_f32<TO>(ok ? to_f32(row[i]) * scale : 0.0f);
}

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) {
  check_device(table, "embedding", "table"); check_device(ids, "embedding", "ids"); check_device(out, "embedding", "out");
  check_float(table, "embedding", "table"); check_float(out, "embedding", "out");
  check_contiguous(table, "embedding", "table"); check_contiguous(ids, "embedding", "ids"); check_contiguous(out, "embedding", "out");
  if (ids.dtype() != DType::I32) fail(ErrorCode::kInvalidArgument, "cuda embedding: ids must be int32");
  if (table.ndim() != 2) fail(ErrorCode::kInvalidArgument, "cuda embedding: table must be 2-D: " + table.describe());
  int64_t t = ids.numel(), hidden = table.dim(1);
  if (out.numel() != t * hidden) fail(ErrorCode::kInvalidArgument, "cuda embedding: out must be [T, H]: " + out.describe());
  if (t == 0) return;
  if (t > INT32_MAX) fail(ErrorCode::kInvalidArgument, "cuda embedding: too many ids");
  MLXB_FLOAT_SWITCH(table.dtype(), TT, MLXB_FLOAT_SWITCH(out.dtype(), TO,
      embedding_kernel<TT, TO><<<static_cast<unsigned>(t), 256, 0, stream()>>>(table.ptr<TT>(), ids.ptr<int32_t>(), out.ptr<TO>(),
                                                                            table.dim(0), hidden, scale)));
  MLXB_CUDA_LAUNCHED("embedding");
}

}  // namespace mlxb::cuda
