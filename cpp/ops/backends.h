// Where each backend's singleton comes from. backend/cpu always provides cpu_backend();
// backend/cuda provides cuda_backend() when CUDA is compiled in, backend/cuda/stub.cc otherwise.
#pragma once
#include "ops/ops.h"

namespace mlxb {
Backend& cpu_backend();
Backend& cuda_backend();  // throws kNotBuilt / kUnsupported when unusable
bool cuda_backend_built();
bool cuda_backend_available();
// True when the CPU backend multiplies bf16 weights with bf16-rounded activations (vdpbf16ps:
// AMD CPUs with AVX512_BF16, or MLXB_CPU_MATMUL=bf16dot); false: float32-exact products.
bool cpu_bf16_matmul();
}  // namespace mlxb
