// matmul: y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]); x, y float32, w float32/bfloat16/float16,
// float32 accumulation. The reference is a plain dot product per output; fast paths (kernels.h)
// are chosen at run time: a GEMV for decode-sized M that streams w once, and a blocked GEMM. w may
// also be a bf16 weight in the four-row block layout (weight_layout.h), same results.
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void matmul_reference(const float* x, const void* w, DType wt, const float* bias, float* y, int64_t m, int64_t n,
                      int64_t k) {
  parallel_for(n, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> wrow(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      row_to_f32(static_cast<const char*>(w) + j * k * dtype_size(wt), wt, k, wrow.data());
      float b = bias ? bias[j] : 0.0f;
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * k;
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) acc += xr[p] * wrow[p];
        y[i * n + j] = acc + b;
      }
    }
  });
}

void CpuBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  const char* op = "matmul";
  check_f32_x_w_y(op, x, w, y);
  const bool blocked = is_blocked_weight(w);
  MLXB_ARG(w.ndim() == 2 || blocked, op, "w must be [N, K], got " + w.describe());
  MLXB_ARG(x.ndim() >= 1 && y.ndim() >= 1, op, "x and y need at least one dimension");
  const int64_t n = blocked ? w.dim(0) * 4 : w.dim(0), k = blocked ? w.dim(1) * 32 : w.dim(1);
  MLXB_ARG(x.dim(-1) == k, op, "x's last dim must equal w's K: " + x.describe() + " vs " + w.describe());
  MLXB_ARG(y.dim(-1) == n, op, "y's last dim must equal w's N: " + y.describe() + " vs " + w.describe());
  const int64_t m = rows_of(x);
  MLXB_ARG(rows_of(y) == m, op, "x and y row counts differ: " + x.describe() + " vs " + y.describe());
  std::vector<float> bias_f32;
  const float* b = nullptr;
  if (bias) {
    check_host(op, "bias", *bias);
    check_float(op, "bias", *bias);
    MLXB_ARG(bias->numel() == n, op, "bias must have N elements: " + bias->describe());
    bias_f32.resize(static_cast<size_t>(n));
    row_to_f32(bias->data(), bias->dtype(), n, bias_f32.data());
    b = bias_f32.data();
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    float* yp = y.ptr<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) yp[i * n + j] = b ? b[j] : 0.0f;
    return;
  }
  if (blocked) {
    MLXB_CHECK(bf16_dot(), "a four-row block weight outside the bf16-dot matmul path");
    avx512::matmul_blocked(x.ptr<float>(), w.data(), b, y.ptr<float>(), m, n, k);
    return;
  }
  matmul_dispatch(x.ptr<float>(), w.data(), w.dtype(), b, y.ptr<float>(), m, n, k);
}

}  // namespace mlxb::cpu
