// Tensor construction, views and copies. Device memory goes through the owning Backend.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/host_cache.h"
#include "ops/ops.h"

namespace mlxb {

static Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) { s[i] = acc; acc *= shape[i]; }
  return s;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) fail(ErrorCode::kInvalidFile, std::string("size overflow in ") + what);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) fail(ErrorCode::kInvalidFile, std::string("size overflow in ") + what);
  return r;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset_bytes, DType dtype, Shape shape)
    : storage_(std::move(storage)), offset_(offset_bytes), dtype_(dtype), shape_(std::move(shape)) {
  strides_ = contiguous_strides(shape_);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, "tensor shape");
  int64_t bytes = checked_mul(n, dtype_size(dtype), "tensor bytes");
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->bytes = bytes;
  if (device == Device::kCPU) {
    size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
    if (rounded == 0) rounded = 64;
    st->data = host_alloc(rounded);
    if (!st->data) fail(ErrorCode::kOutOfMemory, "out of host memory allocating " + std::to_string(bytes) + " bytes");
    st->release = [rounded](void* p) { host_free(p, rounded); };
  } else {
    Backend& be = backend(device);
    st->data = be.alloc(bytes == 0 ? 1 : bytes);
    st->release = [&be](void* p) { be.free(p); };
  }
  return Tensor(std::move(st), 0, dtype, shape);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device == Device::kCPU) std::memset(t.data(), 0, static_cast<size_t>(t.nbytes()));
  else backend(device).zero(t.data(), t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  auto st = std::make_shared<Storage>();
  st->data = data;
  st->device = device;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  st->bytes = n * dtype_size(dtype);
  return Tensor(std::move(st), 0, dtype, shape);
}

Tensor Tensor::reshape(const Shape& shape) const {
  MLXB_CHECK(is_contiguous(), "reshape of a non-contiguous tensor");
  Tensor t(storage_, offset_, dtype_, shape);
  MLXB_CHECK(t.numel() == numel(), "reshape changes element count: " + describe());
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  MLXB_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "slice_rows out of range");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.offset_ = offset_ + begin * strides_[0] * dtype_size(dtype_);
  return t;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset_elems) const {
  MLXB_CHECK(shape.size() == strides.size(), "as_strided rank mismatch");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset_ + offset_elems * dtype_size(dtype_);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  MLXB_CHECK(src.numel() == numel(), "copy_from size mismatch: " + src.describe() + " -> " + describe());
  MLXB_CHECK(src.is_contiguous() && is_contiguous(), "copy_from needs contiguous tensors");
  if (src.dtype() == dtype_) {
    Device d = device() == Device::kCPU ? src.device() : device();
    backend(d).copy(data(), device(), src.data(), src.device(), nbytes());
    return;
  }
  if (src.device() == device()) {
    Tensor self = *this;
    backend(device()).convert(src, self);
    return;
  }
  // Cross-device and cross-dtype: convert on the host side.
  if (src.device() == Device::kCPU) {
    Tensor tmp = empty(shape_, dtype_, Device::kCPU);
    backend(Device::kCPU).convert(src, tmp);
    copy_from(tmp);
  } else {
    Tensor tmp = src.to(Device::kCPU);
    copy_from(tmp);
  }
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::astype(DType dtype) const {
  Tensor t = empty(shape_, dtype, device());
  t.copy_from(*this);
  return t;
}

std::string Tensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << "[";
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? ", " : "") << shape_[i];
  os << "] " << device_name(device());
  return os.str();
}

}  // namespace mlxb
