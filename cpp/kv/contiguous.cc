// Contiguous cache: position p lives in slot p. Capacity grows in chunks (old rows copied over)
// up to spec.max_tokens; attention sees slots [0, length) with slot positions 0..length-1.
#include <algorithm>
#include <string>

#include "kv/factory.h"
#include "kv/storage.h"
#include "ops/ops.h"

namespace mlxb::kv {

namespace {

constexpr int64_t kGrowChunk = 256;

class ContiguousCache final : public LayerCache {
 public:
  explicit ContiguousCache(const CacheSpec& spec) : spec_(spec) {}

  KVView update(const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t) override {
    check_update(spec_, k, v, pos, t, length_);
    const int64_t need = checked_add(length_, t, "kv cache length");
    if (need > spec_.max_tokens)
      fail(ErrorCode::kInvalidArgument, "sequence of " + std::to_string(need) + " tokens exceeds the cache capacity of " +
                                            std::to_string(spec_.max_tokens) + " tokens", "max_tokens");
    if (need > buf_.capacity) grow(need);
    std::vector<int32_t> slots(pos, pos + t);
    Tensor slot_t = device_i32(slots.data(), t, spec_.device);
    Tensor kd = buf_.k, vd = buf_.v;
    ops::kv_write(k, slot_t, kd);
    ops::kv_write(v, slot_t, vd);
    length_ = need;
    KVView view;
    view.k = buf_.k_view(length_);
    view.v = buf_.v_view(length_);
    view.pos = positions_.slice_rows(0, length_);
    return view;
  }

  bool device_layout(int64_t t, DeviceLayout& out) override {
    const int64_t need = checked_add(length_, t, "kv cache length");
    if (need > spec_.max_tokens) return false;
    if (need > buf_.capacity) grow(std::max(need, 2 * buf_.capacity));
    out.k = buf_.k;
    out.v = buf_.v;
    out.pos = positions_;
    out.capacity = buf_.capacity;
    out.ring = false;
    out.host_pos = nullptr;
    return true;
  }

  void commit(const int32_t* pos, int64_t t) override {
    if (t <= 0 || pos[0] != length_ || length_ + t > buf_.capacity)
      fail(ErrorCode::kInternal, "kv cache: a captured step does not continue the sequence");
    length_ += t;
  }

  int64_t length() const override { return length_; }
  int64_t bytes() const override { return buf_.bytes() + (positions_.defined() ? positions_.nbytes() : 0); }
  void reset() override { length_ = 0; }
  bool save_state(Tensor& k, Tensor& v) const override {
    buf_.to_host(length_, spec_, k, v);
    return true;
  }
  bool load_state(const Tensor& k, const Tensor& v) override {
    const Shape want = {spec_.kv_heads, k.ndim() == 3 ? k.dim(1) : -1, spec_.head_dim};
    for (const Tensor* t : {&k, &v})
      if (t->device() != Device::kCPU || t->dtype() != spec_.dtype || t->shape() != want || !t->is_contiguous())
        fail(ErrorCode::kInvalidArgument, "saved keys/values " + t->describe() + " do not fit this cache (" + dtype_name(spec_.dtype) + " [" +
                                              std::to_string(spec_.kv_heads) + ", n, " + std::to_string(spec_.head_dim) + "])", "state");
    const int64_t n = k.dim(1);
    if (n > spec_.max_tokens)
      fail(ErrorCode::kInvalidArgument, "a saved state of " + std::to_string(n) + " tokens exceeds the cache capacity of " +
                                            std::to_string(spec_.max_tokens) + " tokens", "maxTokens");
    if (n > buf_.capacity) grow(n);
    buf_.from_host(k, v, n, spec_);
    length_ = n;
    return true;
  }
  bool can_truncate(int64_t length) const override { return length >= 0 && length <= length_; }
  void truncate(int64_t length) override {
    if (!can_truncate(length)) fail(ErrorCode::kInvalidArgument, "kv cache: cannot truncate to " + std::to_string(length) + " tokens");
    length_ = length;
  }

 private:
  void grow(int64_t need) {
    int64_t cap = std::max(need, buf_.capacity + kGrowChunk);
    cap = std::min(((cap + kGrowChunk - 1) / kGrowChunk) * kGrowChunk, spec_.max_tokens);
    KVBuffers next;
    next.allocate(spec_, cap);
    if (length_ > 0) next.copy_runs(buf_, {{0, 0, length_}}, spec_);
    buf_ = std::move(next);
    std::vector<int32_t> p(static_cast<size_t>(cap));
    for (int64_t i = 0; i < cap; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    positions_ = device_i32(p.data(), cap, spec_.device);
  }

  CacheSpec spec_;
  KVBuffers buf_;
  Tensor positions_;  // i32 [capacity] = 0, 1, 2, ... on the device
  int64_t length_ = 0;
};

}  // namespace

std::unique_ptr<LayerCache> make_contiguous_cache(const CacheSpec& spec) { return std::make_unique<ContiguousCache>(spec); }

}  // namespace mlxb::kv
