// Quantized matmul on the CPU: argument checks, the scalar reference kernel, and the run-time
// choice of the AVX-512 / AVX2 kernels (qmatmul_avx512.cc, qmatmul_avx2.cc).
#include <cstring>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/qmatmul.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "quant/affine.h"

namespace mlxb::cpu {
namespace qmm {

bool wants_nibble_order(int bits) { return bits == 4; }

void to_nibble_order(const float* x, int64_t K, float* out) {
  for (int64_t b = 0; b < K; b += 32) {
    for (int j = 0; j < 16; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 16 + j] = x[b + 2 * j + 1];
    }
  }
}

void kernel_scalar(const Args& a, int64_t n0, int64_t n1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(a.K));
  for (int64_t n = n0; n < n1; ++n) {
    quant::dequantize_rows(*a.w, n, n + 1, row.data());
    for (int64_t m = 0; m < a.M; ++m) {
      const float* xm = a.x + m * a.K;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.K; ++k) acc += xm[k] * row[k];
      a.y[m * a.N + n] = acc;
    }
  }
}

}  // namespace qmm

void CpuBackend::qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  quant::validate(w, "qmatmul weight");
  if (w.packed.device() != Device::kCPU) fail(ErrorCode::kInvalidArgument, "qmatmul: weight is not on the CPU");
  if (x.dtype() != DType::F32 || y.dtype() != DType::F32 || !x.is_contiguous() || !y.is_contiguous())
    fail(ErrorCode::kInvalidArgument, "qmatmul: x and y must be contiguous float32 on the CPU, got " + x.describe() + " and " + y.describe());
  const int64_t K = w.cols, N = w.rows;
  if (x.ndim() < 1 || x.dim(-1) != K)
    fail(ErrorCode::kInvalidArgument, "qmatmul: x " + x.describe() + " does not have " + std::to_string(K) + " columns");
  const int64_t M = x.numel() / K;
  if (y.numel() != M * N || y.dim(-1) != N)
    fail(ErrorCode::kInvalidArgument, "qmatmul: y " + y.describe() + " is not [" + std::to_string(M) + ", " + std::to_string(N) + "]");
  if (bias && (bias->numel() != N || bias->dtype() != DType::F32))
    fail(ErrorCode::kInvalidArgument, "qmatmul: bias must be float32 [" + std::to_string(N) + "], got " + bias->describe());
  if (M == 0) return;

  const CpuFeatures& f = cpu_features();
  void (*kernel)(const qmm::Args&, int64_t, int64_t) = qmm::kernel_scalar;
  if (f.avx512f && f.avx512bw && f.f16c) kernel = qmm::kernel_avx512;
  else if (f.avx2 && f.fma && f.f16c) kernel = qmm::kernel_avx2;

  qmm::Args a;
  a.w = &w;
  a.y = y.ptr<float>();
  a.M = M;
  a.N = N;
  a.K = K;
  std::vector<float> prepared;
  if (kernel != qmm::kernel_scalar && qmm::wants_nibble_order(w.bits)) {
    prepared.resize(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m) qmm::to_nibble_order(x.ptr<float>() + m * K, K, prepared.data() + m * K);
    a.x = prepared.data();
  } else {
    a.x = x.ptr<float>();
  }
  // Column blocks: enough per task to amortise the pool, small enough to balance 2..N cores.
  const int64_t grain = std::max<int64_t>(16, std::min<int64_t>(256, N / (4 * num_threads()) + 1));
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) { kernel(a, n0, n1); });
  if (bias) {
    const float* b = bias->ptr<float>();
    float* yp = y.ptr<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) yp[m * N + n] += b[n];
  }
}

}  // namespace mlxb::cpu
