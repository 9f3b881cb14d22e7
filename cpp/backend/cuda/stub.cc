// The CUDA backend of a build without nvcc: every use says so.
#include "ops/backends.h"

namespace mlxb {

Backend& cuda_backend() {
  fail(ErrorCode::kNotBuilt, "this build of @mlx-bun/inference has no CUDA backend (rebuild where nvcc is installed)");
}
bool cuda_backend_built() { return false; }
bool cuda_backend_available() { return false; }

}  // namespace mlxb
