// The gated-MLP activations in float32, shared by gated_act.cu and the fused gate/up GEMV.
#pragma once
#include "ops/ops.h"

namespace mlxb::cuda {

template <Activation A>
__device__ __forceinline__ float activate(float g) {
  if constexpr (A == Activation::kSiLU) {
    return g / (1.0f + expf(-g));
  } else if constexpr (A == Activation::kGeluExact) {
    return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
  } else {
    const float c = 0.79788456080286536f;  // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
}

}  // namespace mlxb::cuda
