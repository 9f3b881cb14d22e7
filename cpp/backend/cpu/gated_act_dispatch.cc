// Picks the gated activation kernel for this CPU (reference until the SIMD paths land).
#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"

namespace mlxb::cpu {

void gated_act_dispatch(const float* g, const float* u, float* o, int64_t n, Activation act) {
  gated_act_reference(g, u, o, n, act);
}

}  // namespace mlxb::cpu
