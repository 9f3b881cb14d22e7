// Picks the matmul kernel for this CPU and shape (reference until the SIMD paths land).
#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"

namespace mlxb::cpu {

void matmul_dispatch(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                     int64_t k) {
  matmul_reference(x, w, wt, bias, y, m, n, k);
}

}  // namespace mlxb::cpu
