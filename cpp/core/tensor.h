// Tensor: dtype, shape, strides (in elements) and a shared storage that is owned host memory,
// an mmapped file region, or device memory. Views share storage. Not an autograd or lazy array:
// every op writes into a tensor its caller allocated.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace mlxb {

enum class Device : uint8_t { kCPU, kCUDA };

inline const char* device_name(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }

// A block of memory and how to give it back. `release` runs when the last view goes away.
struct Storage {
  void* data = nullptr;
  int64_t bytes = 0;
  Device device = Device::kCPU;
  std::function<void(void*)> release;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() { if (release && data) release(data); }
};

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  // Contiguous tensor over `storage` starting at `offset_bytes`.
  Tensor(std::shared_ptr<Storage> storage, int64_t offset_bytes, DType dtype, Shape shape);

  // Fresh contiguous tensor; CPU memory is 64-byte aligned. Device memory comes from that
  // device's allocator (throws kNotBuilt when the backend is not compiled in).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::kCPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::kCPU);
  // Wraps caller memory without owning it (the caller keeps it alive while the tensor is used).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::kCPU);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::kCPU; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + ndim() : i)); }
  int64_t stride(int64_t i) const { return strides_.at(static_cast<size_t>(i < 0 ? i + ndim() : i)); }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset_bytes() const { return offset_; }

  void* data() const { return static_cast<char*>(storage_->data) + offset_; }
  template <typename T> T* ptr() const { return static_cast<T*>(data()); }

  // Same storage, new shape (contiguous tensors only; numel must match).
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along dim 0 (a view; no copy).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // General strided view: caller vouches the view stays inside the storage.
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset_elems) const;

  // Copies (across devices too) into a new contiguous tensor on `device`.
  Tensor to(Device device) const;
  // Element-type conversion into a new contiguous tensor on the same device.
  Tensor astype(DType dtype) const;
  // Copy `src` into this tensor (same shape; dtypes may differ on CPU).
  void copy_from(const Tensor& src);

  std::string describe() const;  // "bfloat16[4096, 2048] cpu" for error messages

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
  Shape shape_;
  Shape strides_;
};

// Checked arithmetic for sizes read from files: throws kInvalidFile on overflow.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

}  // namespace mlxb
