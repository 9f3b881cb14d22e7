// Quantized GEMV instantiations for 3-, 5- and 6-bit weights (see qgemv.cuh).
#include "backend/cuda/qgemv.cuh"

namespace mlxb::cuda::qmm {

void qgemv_b3(const Params& p, DType xd) { qgemv_launch<3>(p, xd); }
void qgemv_b5(const Params& p, DType xd) { qgemv_launch<5>(p, xd); }
void qgemv_b6(const Params& p, DType xd) { qgemv_launch<6>(p, xd); }

}  // namespace mlxb::cuda::qmm
