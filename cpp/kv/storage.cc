// Key/value buffers and checks shared by the cache legos (see storage.h).
#include "kv/storage.h"

#include <string>

#include "ops/ops.h"

namespace mlxb::kv {

Tensor device_i32(const int32_t* values, int64_t n, Device device) {
  Tensor host = Tensor::empty({n}, DType::I32, Device::kCPU);
  for (int64_t i = 0; i < n; ++i) host.ptr<int32_t>()[i] = values[i];
  return device == Device::kCPU ? host : host.to(device);
}

int64_t check_update(const CacheSpec& spec, const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t,
                     int64_t expected_first) {
  auto bad = [](const std::string& m) { fail(ErrorCode::kInvalidArgument, "kv cache update: " + m); };
  if (t <= 0) bad("needs at least one token");
  for (const Tensor* x : {&k, &v}) {
    if (!x->defined() || x->ndim() != 3 || x->dim(0) != t || x->dim(1) != spec.kv_heads || x->dim(2) != spec.head_dim)
      bad("keys/values must be [" + std::to_string(t) + ", " + std::to_string(spec.kv_heads) + ", " +
          std::to_string(spec.head_dim) + "], got " + (x->defined() ? x->describe() : std::string("undefined")));
    if (x->device() != spec.device) bad("keys/values are on " + std::string(device_name(x->device())) + ", the cache on " +
                                        device_name(spec.device));
  }
  for (int64_t i = 0; i < t; ++i)
    if (pos[i] != expected_first + i)
      bad("positions must continue the sequence: expected " + std::to_string(expected_first + i) + " at " +
          std::to_string(i) + ", got " + std::to_string(pos[i]));
  return t;
}

void KVBuffers::allocate(const CacheSpec& spec, int64_t cap) {
  checked_mul(checked_mul(spec.kv_heads, cap, "kv cache"), spec.head_dim, "kv cache");  // throws on overflow
  // Zeroed: attention kernels may weigh a slot nothing wrote yet (a masked key) by exactly 0, and
  // 0 x NaN (stale bits of reused memory) would be NaN.
  k = Tensor::zeros({spec.kv_heads, cap, spec.head_dim}, spec.dtype, spec.device);
  v = Tensor::zeros({spec.kv_heads, cap, spec.head_dim}, spec.dtype, spec.device);
  capacity = cap;
}

void KVBuffers::copy_runs(const KVBuffers& old, const std::vector<Run>& runs, const CacheSpec& spec) {
  if (runs.empty()) return;
  Backend& be = backend(spec.device);
  const int64_t row = spec.head_dim * dtype_size(spec.dtype);
  for (int64_t h = 0; h < spec.kv_heads; ++h) {
    for (const Run& r : runs) {
      for (const auto& [dst, src] : {std::pair<const Tensor*, const Tensor*>{&k, &old.k}, {&v, &old.v}}) {
        char* d = static_cast<char*>(dst->data()) + (h * capacity + r.to) * row;
        const char* s = static_cast<const char*>(src->data()) + (h * old.capacity + r.from) * row;
        be.copy(d, spec.device, s, spec.device, r.n * row);
      }
    }
  }
}

void KVBuffers::to_host(int64_t n, const CacheSpec& spec, Tensor& k_out, Tensor& v_out) const {
  k_out = Tensor::empty({spec.kv_heads, n, spec.head_dim}, spec.dtype, Device::kCPU);
  v_out = Tensor::empty({spec.kv_heads, n, spec.head_dim}, spec.dtype, Device::kCPU);
  Backend& be = backend(spec.device);
  const int64_t row = spec.head_dim * dtype_size(spec.dtype);
  for (int64_t h = 0; h < spec.kv_heads && n > 0; ++h) {
    be.copy(static_cast<char*>(k_out.data()) + h * n * row, Device::kCPU, static_cast<const char*>(k.data()) + h * capacity * row, spec.device, n * row);
    be.copy(static_cast<char*>(v_out.data()) + h * n * row, Device::kCPU, static_cast<const char*>(v.data()) + h * capacity * row, spec.device, n * row);
  }
}

void KVBuffers::from_host(const Tensor& k_in, const Tensor& v_in, int64_t n, const CacheSpec& spec) {
  Backend& be = backend(spec.device);
  const int64_t row = spec.head_dim * dtype_size(spec.dtype);
  for (int64_t h = 0; h < spec.kv_heads && n > 0; ++h) {
    be.copy(static_cast<char*>(k.data()) + h * capacity * row, spec.device, static_cast<const char*>(k_in.data()) + h * n * row, Device::kCPU, n * row);
    be.copy(static_cast<char*>(v.data()) + h * capacity * row, spec.device, static_cast<const char*>(v_in.data()) + h * n * row, Device::kCPU, n * row);
  }
}

Tensor KVBuffers::k_view(int64_t s) const {
  return k.as_strided({k.dim(0), s, k.dim(2)}, {capacity * k.dim(2), k.dim(2), 1}, 0);
}

Tensor KVBuffers::v_view(int64_t s) const {
  return v.as_strided({v.dim(0), s, v.dim(2)}, {capacity * v.dim(2), v.dim(2), 1}, 0);
}

}  // namespace mlxb::kv
