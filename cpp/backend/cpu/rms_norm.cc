// rms_norm: y = x * rsqrt(mean(x^2) + eps) * w, or * (1 + w) for Gemma (add_one), per row of the
// last dim, float32 math as PyTorch does it (the product x * rsqrt(...) is rounded before the
// weight multiplies it). x may alias y.
#include <cmath>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void rms_norm_row_reference(const float* x, const float* w, float* y, int64_t h, float eps) {
  double ss = 0.0;
  for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(h)) + eps);
  for (int64_t j = 0; j < h; ++j) y[j] = (x[j] * inv) * w[j];
}

void rms_norm_row_dispatch(const float* x, const float* w, float* y, int64_t h, float eps) {
  if (simd_level() >= SimdLevel::kAvx2) avx2::rms_norm_row(x, w, y, h, eps);
  else rms_norm_row_reference(x, w, y, h, eps);
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y) {
  const char* op = "rms_norm";
  const int64_t h = check_norm_args(op, x, w, y), rows = rows_of(x);
  std::vector<float> wf(static_cast<size_t>(h));
  row_to_f32(w.data(), w.dtype(), h, wf.data());
  if (add_one)
    for (float& v : wf) v = 1.0f + v;
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      rms_norm_row_dispatch(xp + r * h, wf.data(), yp + r * h, h, eps);
    }
  });
}

}  // namespace mlxb::cpu
