// Picks the attention kernel for this CPU and shape (reference until the SIMD paths land).
#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"

namespace mlxb::cpu {

void attention_dispatch(const AttentionView& a) { attention_reference(a); }

}  // namespace mlxb::cpu
