// gated_act: out[T,F] = act(gate) * up, float32. SiLU g / (1 + exp(-g)); GELU exact
// 0.5 g (1 + erf(g / sqrt 2)); GELU tanh 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), the
// formulas of torch.nn.functional. out may alias gate or up.
#include <algorithm>
#include <cmath>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void gated_act_reference(const float* g, const float* u, float* o, int64_t n, Activation act) {
  switch (act) {
    case Activation::kSiLU:
      for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      break;
    case Activation::kGeluExact:
      for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * 0.70710678118654752f)) * u[i];
      break;
    case Activation::kGeluTanh: {
      const float c = 0.79788456080286536f;  // sqrt(2 / pi)
      for (int64_t i = 0; i < n; ++i) {
        const float x = g[i];
        o[i] = 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x))) * u[i];
      }
      break;
    }
  }
}

void CpuBackend::gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) {
  const char* op = "gated_act";
  check_host(op, "gate", gate);
  check_host(op, "up", up);
  check_host(op, "out", out);
  check_dtype(op, "gate", gate, DType::F32);
  check_dtype(op, "up", up, DType::F32);
  check_dtype(op, "out", out, DType::F32);
  MLXB_ARG(gate.shape() == up.shape() && gate.numel() == out.numel(), op,
          "gate, up and out must have the same shape: " + gate.describe() + ", " + up.describe() + ", " + out.describe());
  MLXB_ARG(act == Activation::kSiLU || act == Activation::kGeluExact || act == Activation::kGeluTanh, op,
          "unknown activation");
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  // Work items are pieces of one row cut at multiples of 1024 from the row start, so whether an
  // element takes the SIMD body or the scalar tail depends only on its column: a row's result
  // does not depend on how many rows share the call (batch invariance).
  const int64_t f = gate.ndim() > 0 ? gate.dim(-1) : 1;
  if (f == 0 || gate.numel() == 0) return;
  const int64_t rows = gate.numel() / f, pieces = (f + 1023) / 1024;
  parallel_for(rows * pieces, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / pieces, c0 = (i % pieces) * 1024, c1 = std::min(f, c0 + 1024), at = r * f + c0;
      gated_act_dispatch(g + at, u + at, o + at, c1 - c0, act);
    }
  });
}

}  // namespace mlxb::cpu
