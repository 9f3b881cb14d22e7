// Device -> backend lookup, and the generic defaults of the optional Backend ops.
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "ops/backends.h"

namespace mlxb {

Backend& backend(Device device) { return device == Device::kCPU ? cpu_backend() : cuda_backend(); }
bool cuda_built() { return cuda_backend_built(); }
bool cuda_available() { return cuda_backend_available(); }

void Backend::add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y) {
  add(x, branch, x);
  rms_norm(x, w, eps, add_one, y);
}

void Backend::argmax(const Tensor& x, Tensor& out) {
  if (x.device() != Device::kCPU || out.device() != Device::kCPU || x.dtype() != DType::F32 || out.dtype() != DType::I32 ||
      !x.is_contiguous() || x.ndim() < 1)
    fail(ErrorCode::kUnsupported, "argmax: the generic op takes a contiguous float32 CPU tensor and an int32 CPU output: " +
                                      x.describe() + " -> " + out.describe());
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (n == 0 || out.numel() != rows) fail(ErrorCode::kInvalidArgument, "argmax: out must hold one index per row: " + out.describe());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.ptr<float>() + r * n;
    int64_t best = 0;
    while (best + 1 < n && std::isnan(row[best])) ++best;
    for (int64_t i = best + 1; i < n; ++i)
      if (row[i] > row[best]) best = i;  // first maximum; NaN compares false
    out.ptr<int32_t>()[r] = static_cast<int32_t>(best);
  }
}

void Backend::gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) {
  if (w.ndim() != 2 || w.dim(0) % 2 != 0 || out.ndim() < 1 || out.dim(-1) * 2 != w.dim(0))
    fail(ErrorCode::kInvalidArgument, "gated_matmul: w must be [2F, K] and out [M, F]: " + w.describe() + " -> " + out.describe());
  const int64_t f = w.dim(0) / 2, m = out.numel() / f;
  Tensor gate = Tensor::empty({m, f}, out.dtype(), out.device()), up = Tensor::empty({m, f}, out.dtype(), out.device());
  Tensor bg, bu;
  if (bias) {
    bg = bias->slice_rows(0, f);
    bu = bias->slice_rows(f, 2 * f);
  }
  matmul(x, w.slice_rows(0, f), bias ? &bg : nullptr, gate);
  matmul(x, w.slice_rows(f, 2 * f), bias ? &bu : nullptr, up);
  gated_act(gate, up, act, out);
}

void Backend::qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out) {
  if (w.rows % 2 != 0 || out.ndim() < 1 || out.dim(-1) * 2 != w.rows)
    fail(ErrorCode::kInvalidArgument, "qgated_matmul: w must have 2F rows and out be [M, F]: " + std::to_string(w.rows) + " rows -> " +
                                          out.describe());
  const int64_t f = w.rows / 2, m = out.numel() / f;
  auto half = [&](int64_t r0) {
    if (w.tile != 0 && f % w.tile != 0)  // a tile's rows keep their span, so a cut between tiles is a row view
      fail(ErrorCode::kInvalidArgument, "qgated_matmul: a weight in " + std::to_string(w.tile) + "-row tiles cannot be cut at row " +
                                            std::to_string(f));
    QuantWeight h = w;
    h.packed = w.packed.slice_rows(r0, r0 + f);
    h.scales = w.scales.slice_rows(r0, r0 + f);
    if (w.biases.defined()) h.biases = w.biases.slice_rows(r0, r0 + f);
    h.rows = f;
    return h;
  };
  Tensor gate = Tensor::empty({m, f}, out.dtype(), out.device()), up = Tensor::empty({m, f}, out.dtype(), out.device());
  Tensor bg, bu;
  if (bias) {
    bg = bias->slice_rows(0, f);
    bu = bias->slice_rows(f, 2 * f);
  }
  qmatmul(x, half(0), bias ? &bg : nullptr, gate);
  qmatmul(x, half(f), bias ? &bu : nullptr, up);
  gated_act(gate, up, act, out);
}

void Backend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                            const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  rope(q, positions, args);
  rope(k, positions, args);
  kv_write(k, slots, k_cache);
  kv_write(v, slots, v_cache);
}

void Backend::rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope,
                                   const Tensor& slots, Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows,
                                   const AttentionArgs& args, Tensor& out) {
  rope_kv_write(q, k, v, positions, rope, slots, k_cache, v_cache);
  paged_attention(q, k_cache, v_cache, rows, args, out);
}

void Backend::matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid) {
  Tensor branch = Tensor::empty(resid.shape(), resid.dtype(), resid.device());
  matmul(x, w, bias, branch);
  add(resid, branch, resid);
}

void Backend::norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y) {
  Tensor normed = Tensor::empty(x.shape(), x.dtype(), x.device());
  rms_norm(x, norm.w, norm.eps, norm.add_one, normed);
  matmul(normed, w, bias, y);
}

void Backend::norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act,
                                Tensor& out) {
  Tensor normed = Tensor::empty(x.shape(), x.dtype(), x.device());
  rms_norm(x, norm.w, norm.eps, norm.add_one, normed);
  gated_matmul(normed, w, bias, act, out);
}

void Backend::norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                            const Tensor& positions, const RopeArgs& rope_args, const Tensor& slots, Tensor& k_cache,
                            Tensor& v_cache, Tensor& qkv) {
  const int64_t d = shape.head_dim, qd = shape.heads * d, kvd = shape.kv_heads * d;
  if (qkv.numel() != qd + 2 * kvd || !qkv.is_contiguous())
    fail(ErrorCode::kInvalidArgument, "norm_qkv_rope: qkv must be a contiguous [1, (H + 2 Hkv) D] row: " + qkv.describe());
  norm_matmul(x, norm, w, bias, qkv);
  Tensor flat = qkv.reshape({qd + 2 * kvd});
  Tensor qk = flat.slice_rows(0, qd + kvd).reshape({1, shape.heads + shape.kv_heads, d});
  rope(qk, positions, rope_args);
  if (!slots.defined()) return;
  Tensor k = flat.slice_rows(qd, qd + kvd).reshape({1, shape.kv_heads, d});
  Tensor v = flat.slice_rows(qd + kvd, qd + 2 * kvd).reshape({1, shape.kv_heads, d});
  kv_write(k, slots, k_cache);
  kv_write(v, slots, v_cache);
}

void Backend::qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid) {
  Tensor branch = Tensor::empty(resid.shape(), resid.dtype(), resid.device());
  qmatmul(x, w, bias, branch);
  add(resid, branch, resid);
}

void Backend::norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  Tensor normed = Tensor::empty(x.shape(), x.dtype(), x.device());
  rms_norm(x, norm.w, norm.eps, norm.add_one, normed);
  qmatmul(normed, w, bias, y);
}

void Backend::norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act,
                                 Tensor& out) {
  Tensor normed = Tensor::empty(x.shape(), x.dtype(), x.device());
  rms_norm(x, norm.w, norm.eps, norm.add_one, normed);
  qgated_matmul(normed, w, bias, act, out);
}

namespace {
// The default Backend::read_later copies at once into one of these slots.
struct HostReads {
  std::mutex mu;
  int64_t next = 0;
  int64_t size[Backend::kReadSlots] = {};
  unsigned char data[Backend::kReadSlots][Backend::kReadBytes] = {};
};

HostReads& host_reads() {
  static HostReads* r = new HostReads();
  return *r;
}
}  // namespace

void Backend::check_read_bytes(int64_t bytes) {
  if (bytes <= 0 || bytes > kReadBytes)
    fail(ErrorCode::kInvalidArgument,
         "read_later takes 1 to " + std::to_string(kReadBytes) + " bytes, not " + std::to_string(bytes));
}

int64_t Backend::read_slot(int64_t ticket, int64_t next) {
  if (ticket < 0 || ticket >= next || next - ticket > kReadSlots)
    fail(ErrorCode::kInternal, "read ticket " + std::to_string(ticket) + " is unknown or expired");
  return ticket % kReadSlots;
}

int64_t Backend::read_later(const void* src, int64_t bytes) {
  check_read_bytes(bytes);
  HostReads& r = host_reads();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t t = r.next;
  const int64_t slot = t % kReadSlots;
  copy(r.data[slot], Device::kCPU, src, device(), bytes);
  r.size[slot] = bytes;
  ++r.next;
  return t;
}

void Backend::read_wait(int64_t ticket, void* dst) {
  HostReads& r = host_reads();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t slot = read_slot(ticket, r.next);
  std::memcpy(dst, r.data[slot], static_cast<size_t>(r.size[slot]));
}

std::unique_ptr<DeviceGraph> Backend::end_capture() {
  fail(ErrorCode::kUnsupported, "this backend cannot capture device graphs");
}

}  // namespace mlxb
