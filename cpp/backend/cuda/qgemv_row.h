// What the checks ask of the row-streaming one-row 4-bit GEMV (qgemv_row.cu) from host code.
#pragma once
#include <cstdint>

namespace mlxb::cuda::qmm {

int64_t qgemv_row_launches();  // launches so far in this process
bool qgemv_row_enabled();      // the default one-row path (MLXB_QGEMV_ROW)

}  // namespace mlxb::cuda::qmm
