// Device -> backend lookup, and the generic defaults of the optional Backend ops.
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

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

// The generic forms of the row-scaled ops read and write host memory: float tensors on the CPU.
float host_get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.ptr<float>()[i];
    case DType::BF16: return bf16_to_f32(t.ptr<uint16_t>()[i]);
    case DType::F16: return f16_to_f32(t.ptr<uint16_t>()[i]);
    default: fail(ErrorCode::kInternal, "row-scaled op: not a float tensor");
  }
}
void host_set(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::F32: t.ptr<float>()[i] = v; return;
    case DType::BF16: t.ptr<uint16_t>()[i] = f32_to_bf16(v); return;
    case DType::F16: t.ptr<uint16_t>()[i] = f32_to_f16(v); return;
    default: fail(ErrorCode::kInternal, "row-scaled op: not a float tensor");
  }
}
void check_host_float(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> ts) {
  for (auto [t, name] : ts)
    if (t->device() != Device::kCPU || (t->dtype() != DType::F32 && t->dtype() != DType::BF16 && t->dtype() != DType::F16))
      fail(ErrorCode::kUnsupported, std::string(op) + ": the generic op takes float CPU tensors; " + name + " is " + t->describe());
}
// s[t] = 1 / sqrt(mean(x[t]^2) + eps) of each row of a contiguous x [T, H].
std::vector<float> row_inv_rms(const char* op, const Tensor& x, float eps) {
  if (x.ndim() != 2 || !x.is_contiguous()) fail(ErrorCode::kInvalidArgument, std::string(op) + ": x must be a contiguous [T, H]: " + x.describe());
  const int64_t t = x.dim(0), h = x.dim(1);
  std::vector<float> s(static_cast<size_t>(t));
  for (int64_t r = 0; r < t; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < h; ++i) {
      const double v = host_get(x, r * h + i);
      ss += v * v;
    }
    s[static_cast<size_t>(r)] = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
  }
  return s;
}
// Multiplies row r of a [T, H, D] view (heads contiguous within a row) by s[r], in place.
void scale_rows(Tensor& a, const std::vector<float>& s) {
  const int64_t t = a.dim(0), width = a.dim(1) * a.dim(2);
  if (a.stride(2) != 1 || a.stride(1) != a.dim(2)) fail(ErrorCode::kInvalidArgument, "row-scaled op: heads must be contiguous: " + a.describe());
  for (int64_t r = 0; r < t; ++r) {
    Tensor v = a.as_strided({width}, {1}, r * a.stride(0));
    for (int64_t i = 0; i < width; ++i) host_set(v, i, host_get(v, i) * s[static_cast<size_t>(r)]);
  }
}

}  // namespace

void Backend::matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid) { matmul_add(x, w, nullptr, resid); }

void Backend::rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                                       const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  const char* op = "rms_scaled_rope_kv_write";
  check_host_float(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&x, "x"}});
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || k.dim(0) != q.dim(0) || v.dim(0) != q.dim(0) || x.ndim() != 2 || x.dim(0) != q.dim(0))
    fail(ErrorCode::kInvalidArgument, std::string(op) + ": q, k, v [T, H, D] and x [T, H] must have the same rows");
  const std::vector<float> s = row_inv_rms(op, x, eps);
  Tensor vs = Tensor::empty(v.shape(), v.dtype(), Device::kCPU);  // the scaled copy of v (v itself stays as it is)
  const int64_t vw = v.dim(1) * v.dim(2);
  if (v.stride(2) != 1 || v.stride(1) != v.dim(2)) fail(ErrorCode::kInvalidArgument, std::string(op) + ": v's heads must be contiguous");
  for (int64_t r = 0; r < v.dim(0); ++r)
    for (int64_t i = 0; i < vw; ++i) host_set(vs, r * vw + i, host_get(v, r * v.stride(0) + i) * s[static_cast<size_t>(r)]);
  scale_rows(q, s);
  scale_rows(k, s);
  rope_kv_write(q, k, vs, positions, args, slots, k_cache, v_cache);
}

void Backend::rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out) {
  const char* op = "rms_scaled_gated_act";
  check_host_float(op, {{&h, "h"}, {&x, "x"}, {&out, "out"}});
  if (h.ndim() != 2 || out.ndim() != 2 || !h.is_contiguous() || h.dim(1) != 2 * out.dim(1) || h.dim(0) != out.dim(0) || x.ndim() != 2 ||
      x.dim(0) != h.dim(0))
    fail(ErrorCode::kInvalidArgument, std::string(op) + ": needs h [T, 2F] contiguous, x [T, H], out [T, F]: " + h.describe() + ", " +
                                          x.describe() + " -> " + out.describe());
  const int64_t t = h.dim(0), f = out.dim(1);
  const std::vector<float> s = row_inv_rms(op, x, eps);
  Tensor gate = Tensor::empty({t, f}, out.dtype(), Device::kCPU), up = Tensor::empty({t, f}, out.dtype(), Device::kCPU);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < f; ++j) {
      host_set(gate, r * f + j, host_get(h, r * 2 * f + j) * s[static_cast<size_t>(r)]);
      host_set(up, r * f + j, host_get(h, r * 2 * f + f + j) * s[static_cast<size_t>(r)]);
    }
  gated_act(gate, up, act, out);
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
