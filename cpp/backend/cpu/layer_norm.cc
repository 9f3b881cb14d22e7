// layer_norm: y = (x - mean) / sqrt(var + eps) * w + b per row of the last dim (biased variance,
// as torch.nn.LayerNorm); b optional. x may alias y.
#include <cmath>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) {
  const char* op = "layer_norm";
  const int64_t h = check_norm_args(op, x, w, y), rows = rows_of(x);
  std::vector<float> wf(static_cast<size_t>(h)), bf(static_cast<size_t>(h), 0.0f);
  row_to_f32(w.data(), w.dtype(), h, wf.data());
  if (b) {
    check_host(op, "b", *b);
    check_float(op, "b", *b);
    MLXB_ARG(b->numel() == h, op, "b must have " + std::to_string(h) + " elements, got " + b->describe());
    row_to_f32(b->data(), b->dtype(), h, bf.data());
  }
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * h;
      float* yr = yp + r * h;
      double s = 0.0;
      for (int64_t j = 0; j < h; ++j) s += xr[j];
      const double mean = s / static_cast<double>(h);
      double ss = 0.0;
      for (int64_t j = 0; j < h; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
      const float m = static_cast<float>(mean);
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(h)) + eps);
      for (int64_t j = 0; j < h; ++j) yr[j] = (xr[j] - m) * inv * wf[j] + bf[j];
    }
  });
}

}  // namespace mlxb::cpu
