// Picks the attention kernel for this CPU.
#include "backend/cpu/kernels.h"

namespace mlxb::cpu {

void attention_dispatch(const AttentionView& a) {
  if (simd_level() >= SimdLevel::kAvx2) {
    avx2::attention(a);
    return;
  }
  attention_reference(a);
}

}  // namespace mlxb::cpu
