// softcap: x = cap * tanh(x / cap) in place (float32), Gemma 2's logit soft-capping.
#include <cmath>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::softcap(Tensor& x, float cap) {
  const char* op = "softcap";
  check_host(op, "x", x);
  check_dtype(op, "x", x, DType::F32);
  MLXB_ARG(cap > 0.0f && std::isfinite(cap), op, "cap must be a positive finite number");
  float* p = x.ptr<float>();
  parallel_for(x.numel(), 16384, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] = cap * std::tanh(p[i] / cap);
  });
}

}  // namespace mlxb::cpu
