// Quantized GEMV instantiations for 2- and 8-bit weights (see qgemv.cuh).
#include "backend/cuda/qgemv.cuh"

namespace mlxb::cuda::qmm {

void qgemv_b2(const Params& p, DType xd) { qgemv_launch<2>(p, xd); }
void qgemv_b8(const Params& p, DType xd) { qgemv_launch<8>(p, xd); }

}  // namespace mlxb::cuda::qmm
