// Entry points of the CPU kernels, shared by the op files. Each op file holds its plain
// reference; the *_dispatch functions pick the widest SIMD path cpu_features() allows
// (AVX-512 -> AVX2 -> reference). Pointers are to contiguous row-major float32 activations.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "ops/ops.h"

namespace mlxb::cpu {

// --- matmul (matmul.cc, matmul_dispatch.cc, matmul_avx2.cc, matmul_avx512.cc)
void matmul_reference(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                      int64_t k);
void matmul_dispatch(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                     int64_t k);
// Whether bf16 weights go through the AVX-512 bf16-dot kernels (matmul_dispatch.cc), and so
// whether weight_layout.cc gives them the four-row block layout.
bool bf16_dot();

// The kernel family in use: widest allowed by cpu_features() (MLXB_CPU caps it).
enum class SimdLevel { kScalar, kAvx2, kAvx512 };
SimdLevel simd_level();

namespace avx2 {
void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace avx2
namespace avx512 {
// Every M gives each row the same bits (matmul_ordered.h). use_bf16_dot (needs AVX512_BF16): bf16
// weights go through vdpbf16ps with activations rounded to bf16, at every M; otherwise exact
// float32 products.
void matmul(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
            bool use_bf16_dot);
// bf16 weights in the four-row block layout (weight_layout.cc), bf16-dot mode: the bits of matmul.
void matmul_blocked(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace avx512

}  // namespace mlxb::cpu

namespace mlxb::cpu {

// --- attention (attention.cc, attention_dispatch.cc): raw view of checked tensors.
struct AttentionView {
  const float* q = nullptr;      // [t, hq, d]
  const char* k = nullptr;       // [hkv, s, d], element (h, s, j) at (h * k_stride0 + s * d + j)
  const char* v = nullptr;       // [hkv, s, dv]
  DType kv_dtype = DType::F32;
  int64_t k_elem = 4;            // bytes per k/v element
  int64_t k_stride0 = 0, v_stride0 = 0;
  const int32_t* q_pos = nullptr;
  const int32_t* k_pos = nullptr;
  float* out = nullptr;          // [t, hq, dv]
  int64_t t = 0, hq = 0, hkv = 0, s = 0, d = 0, dv = 0;
  float scale = 1.0f, softcap = 0.0f;
  int64_t window = 0;
  bool causal = true;

  bool visible(int32_t qp, int32_t kp) const {
    if (kp < 0) return false;
    if (causal && kp > qp) return false;
    if (window > 0 && static_cast<int64_t>(qp) - kp >= window) return false;
    return true;
  }
};

void attention_reference(const AttentionView& a);
void attention_dispatch(const AttentionView& a);
namespace avx2 {
void attention(const AttentionView& a);
}  // namespace avx2

// --- softmax (softmax.cc): one row, max-subtracted; an all -inf row gives zeros.
void softmax_row(const float* x, float* y, int64_t n);

}  // namespace mlxb::cpu

namespace mlxb::cpu {

// --- gated_act (gated_act.cc, gated_act_dispatch.cc): o[i] = act(g[i]) * u[i] over one range.
void gated_act_reference(const float* g, const float* u, float* o, int64_t n, Activation act);
void gated_act_dispatch(const float* g, const float* u, float* o, int64_t n, Activation act);
namespace avx2 {
void gated_act(const float* g, const float* u, float* o, int64_t n, Activation act);
}  // namespace avx2

}  // namespace mlxb::cpu

namespace mlxb::cpu {

// --- rms_norm (rms_norm.cc, norm_avx2.cc): one row, w already float32 (1 + w folded in).
void rms_norm_row_reference(const float* x, const float* w, float* y, int64_t h, float eps);
void rms_norm_row_dispatch(const float* x, const float* w, float* y, int64_t h, float eps);
namespace avx2 {
void rms_norm_row(const float* x, const float* w, float* y, int64_t h, float eps);
}  // namespace avx2

}  // namespace mlxb::cpu
