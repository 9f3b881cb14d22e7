// out[T,F] = act(gate) * up with act SiLU, exact GELU (erf) or tanh-approximated GELU, computed
// in float32. gate/up/out contiguous, same element count; out may alias gate or up.
#include "backend/cuda/backend.h"
#include "backend/cuda/activation.cuh"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

template <Activation A, typename TG, typename TU, typename TO>
static __global__ void gated_kernel(const TG* gate, const TU* up, TO* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = from_f32<TO>(activate<A>(to_f32(gate[i])) * to_f32(up[i]));
}

template <typename TG, typename TU, typename TO>
static void launch(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) {
  int64_t n = out.numel();
  auto g = gate.ptr<TG>(); auto u = up.ptr<TU>(); auto o = out.ptr<TO>();
  switch (act) {
    case Activation::kSiLU: gated_kernel<Activation::kSiLU><<<grid_for(n), 256, 0, stream()>>>(g, u, o, n); break;
    case Activation::kGeluExact: gated_kernel<Activation::kGeluExact><<<grid_for(n), 256, 0, stream()>>>(g, u, o, n); break;
    case Activation::kGeluTanh: gated_kernel<Activation::kGeluTanh><<<grid_for(n), 256, 0, stream()>>>(g, u, o, n); break;
  }
}

void CudaBackend::gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) {
  for (auto [t, n] : {std::pair{&gate, "gate"}, {&up, "up"}, {&out, "out"}}) {
    check_device(*t, "gated_act", n); check_float(*t, "gated_act", n); check_contiguous(*t, "gated_act", n);
  }
  if (gate.numel() != out.numel() || up.numel() != out.numel())
    fail(ErrorCode::kInvalidArgument, "cuda gated_act: shapes differ: " + gate.describe() + ", " + up.describe() + " -> " + out.describe());
  if (out.numel() == 0) return;
  MLXB_FLOAT_SWITCH(gate.dtype(), TG, MLXB_FLOAT_SWITCH(up.dtype(), TU, MLXB_FLOAT_SWITCH(out.dtype(), TO,
      launch<TG, TU, TO>(gate, up, act, out))));
  MLXB_CUDA_LAUNCHED("gated_act");
}

}  // namespace mlxb::cuda
