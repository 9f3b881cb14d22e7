// Picks the gated activation kernel for this CPU.
#include "backend/cpu/kernels.h"

namespace mlxb::cpu {

void gated_act_dispatch(const float* g, const float* u, float* o, int64_t n, Activation act) {
  if (simd_level() >= SimdLevel::kAvx2) {
    avx2::gated_act(g, u, o, n, act);
    return;
  }
  gated_act_reference(g, u, o, n, act);
}

}  // namespace mlxb::cpu
