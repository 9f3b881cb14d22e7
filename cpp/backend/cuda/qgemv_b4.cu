// Quantized GEMV instantiations for 4-bit weights (see qgemv.cuh).
#include "backend/cuda/qgemv.cuh"

namespace mlxb::cuda::qmm {

void qgemv_b4(const Params& p, DType xd) { qgemv_launch<4>(p, xd); }

}  // namespace mlxb::cuda::qmm
