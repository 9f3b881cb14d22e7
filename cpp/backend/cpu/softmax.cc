// softmax over the last dim (float32): exp(x - max) / sum. x may alias y. A row of all -inf
// gives zeros rather than NaN.
#include <cmath>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void softmax_row(const float* x, float* y, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < n; ++j) y[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = std::exp(x[j] - mx);
    sum += y[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

void CpuBackend::softmax(const Tensor& x, Tensor& y) {
  const char* op = "softmax";
  check_host(op, "x", x);
  check_host(op, "y", y);
  check_dtype(op, "x", x, DType::F32);
  check_dtype(op, "y", y, DType::F32);
  MLXB_ARG(x.ndim() >= 1 && x.numel() == y.numel() && y.dim(-1) == x.dim(-1), op,
          "x and y must have the same shape: " + x.describe() + " vs " + y.describe());
  const int64_t n = x.dim(-1), rows = rows_of(x);
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) softmax_row(xp + r * n, yp + r * n, n);
  });
}

}  // namespace mlxb::cpu
