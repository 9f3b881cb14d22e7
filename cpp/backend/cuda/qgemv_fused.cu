// The one-row quantized projections of a decode step fused with their neighbours (ops.h:
// qmatmul_add, norm_qmatmul, norm_qgated_matmul), for 4-bit weights with 16-bit scales and
// bf16/f16 activations: the default one-row GEMV (qgemv_tma.cu, else qgemv_tcp.cu) with its residual epilogue
// (y += round(result), as qmatmul then add) or, opt-in (norm_fusion below), with x normalised once
// per block in rms_norm's exact order and expressions. Each result is bit-identical to the ops it replaces; every other
// case runs those ops (Backend's generic defaults), or with MLXB_CUDA_FUSED_STRICT=1 (read once;
// for checks that must know the fused kernel ran) throws kUnsupported instead.
#include <cstdlib>
#include <string>

#include "backend/cuda/backend.h"
#include "backend/cuda/qmm.cuh"
#include "quant/affine.h"

namespace mlxb::cuda {

namespace {

bool on_device(const Tensor& t) { return t.defined() && t.device() == Device::kCUDA && t.is_contiguous(); }
bool aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// One row x [K] and y [out_count] of one 2-byte float dtype on the device, w's parts on the
// device, a float bias of w.rows values: the launch parameters, or false.
bool one_row(const Tensor& x, const QuantWeight& w, const Tensor* bias, const Tensor& y, int64_t out_count, qmm::Params& p) {
  if (!on_device(x) || !on_device(y) || !on_device(w.packed) || !on_device(w.scales) || !on_device(w.biases)) return false;
  const DType d = x.dtype();
  if ((d != DType::BF16 && d != DType::F16) || y.dtype() != d || x.numel() != w.cols || y.numel() != out_count || !aligned(x)) return false;
  if (w.bits != 4 || x.data() == y.data()) return false;
  if (bias && (!on_device(*bias) || bias->numel() != w.rows ||
               (bias->dtype() != DType::F32 && bias->dtype() != DType::BF16 && bias->dtype() != DType::F16)))
    return false;
  p = qmm::gemv_params(x, w, w.packed, bias, y, 1);
  return qmm::qgemv_tc_fits(p, w.bits, d);
}

void not_covered(const char* op) {
  static const bool strict = [] {
    const char* v = std::getenv("MLXB_CUDA_FUSED_STRICT");
    return v && v[0] == '1';
  }();
  if (strict) fail(ErrorCode::kUnsupported, std::string("cuda ") + op + ": not covered by the fused kernel (MLXB_CUDA_FUSED_STRICT=1)");
}

// The norm forms are opt-in (MLXB_QFUSED_NORM=1, read once): every block normalising x itself
// sits on the critical path before its first product, and measured end to end on the H200
// (bench.mjs decode, random 1B / 8B 4-bit g64, alternating) it lost: 1B 1,307 / 1,314 tok/s with
// it against 1,391 / 1,437 without, 8B 373 / 376 against 410 / 409 (the unfused layer loop: 1,389
// / 1,351 and 410 / 409). Off, the norm forms run rms_norm and then the GEMV.
bool norm_fusion() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_QFUSED_NORM");
    return v && v[0] == '1';
  }();
  return on;
}

bool norm_ok(const NormArgs& n, const Tensor& x, qmm::Params& p) {
  if (!norm_fusion()) return false;
  if (!on_device(n.w) || n.w.dtype() != x.dtype() || n.w.numel() != x.numel() || !aligned(n.w)) return false;
  p.norm_w = n.w.data();
  p.eps = n.eps;
  p.add_one = n.add_one;
  return true;
}

}  // namespace

void CudaBackend::qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid) {
  quant::validate(w, "qmatmul_add weight");
  qmm::Params p;
  if (one_row(x, w, bias, resid, w.rows, p)) {
    p.add = true;
    if (qmm::qgemv_one_row(p, x.dtype(), false, Activation::kSiLU)) return;
  }
  not_covered("qmatmul_add");
  Backend::qmatmul_add(x, w, bias, resid);
}

void CudaBackend::norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  quant::validate(w, "norm_qmatmul weight");
  qmm::Params p;
  if (one_row(x, w, bias, y, w.rows, p) && norm_ok(norm, x, p) && qmm::qgemv_one_row(p, x.dtype(), false, Activation::kSiLU))
    return;
  not_covered("norm_qmatmul");
  Backend::norm_qmatmul(x, norm, w, bias, y);
}

void CudaBackend::norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act,
                                     Tensor& out) {
  quant::validate(w, "norm_qgated_matmul weight");
  qmm::Params p;
  if (w.rows % 2 == 0 && one_row(x, w, bias, out, w.rows / 2, p) && norm_ok(norm, x, p)) {
    p.N = w.rows / 2;
    if (qmm::qgemv_one_row(p, x.dtype(), true, act)) return;
  }
  not_covered("norm_qgated_matmul");
  Backend::norm_qgated_matmul(x, norm, w, bias, act, out);
}

}  // namespace mlxb::cuda
