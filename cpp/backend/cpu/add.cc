// add: out = a + b elementwise (float32, same shape); out may alias a or b.
#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  check_host(op, "a", a);
  check_host(op, "b", b);
  check_host(op, "out", out);
  check_dtype(op, "a", a, DType::F32);
  check_dtype(op, "b", b, DType::F32);
  check_dtype(op, "out", out, DType::F32);
  MLXB_ARG(a.shape() == b.shape() && a.numel() == out.numel(), op,
          "a, b and out must have the same shape: " + a.describe() + ", " + b.describe() + ", " + out.describe());
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(a.numel(), 16384, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) o[i] = ap[i] + bp[i];
  });
}

}  // namespace mlxb::cpu
