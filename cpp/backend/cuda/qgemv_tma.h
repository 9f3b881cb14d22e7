// What the checks ask of the TMA one-row 4-bit GEMV (qgemv_tma.cu) from host code.
#pragma once
#include <cstdint>

namespace mlxb::cuda::qmm {

int64_t qgemv_tma_launches();  // launches so far in this process
bool qgemv_tma_available();    // sm_90+ and turned on (MLXB_QGEMV_TMA=1)

}  // namespace mlxb::cuda::qmm
