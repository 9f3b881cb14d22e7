// The CUDA backend of a build without nvcc: every use says so.
#include "backend/cuda/cublaslt_sweep.h"
#include "backend/cuda/matmul_rows.h"
#include "backend/cuda/qgemv_row.h"
#include "backend/cuda/qgemv_tma.h"
#include "backend/cuda/stream_probe.h"
#include "ops/backends.h"

namespace mlxb {

Backend& cuda_backend() {
  fail(ErrorCode::kNotBuilt, "this build of @mlx-bun/inference has no CUDA backend (rebuild where nvcc is installed)");
}
bool cuda_backend_built() { return false; }
bool cuda_backend_available() { return false; }

}  // namespace mlxb

namespace mlxb::cuda {

void cublaslt_sweep(int64_t, int64_t, int64_t, DType, const void*, const void* const*, int, void*, int, int, bool) {
  fail(ErrorCode::kNotBuilt, "this build has no CUDA backend");
}
void stream_probe() { fail(ErrorCode::kNotBuilt, "this build has no CUDA backend"); }
void set_rows_gemm_enabled(bool) {}

}  // namespace mlxb::cuda

namespace mlxb::cuda::qmm {

int64_t qgemv_tma_launches() { return 0; }
bool qgemv_tma_available() { return false; }
int64_t qgemv_row_launches() { return 0; }
bool qgemv_row_enabled() { return false; }

}  // namespace mlxb::cuda::qmm
