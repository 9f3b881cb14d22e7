// Rotating (sliding-window) cache: position p lives in slot p % capacity. For an update of T
// tokens starting at position L the queries may look back window-1 keys, so positions
// L-window+1 .. L+T-1 must all be resident at once: capacity is at least window-1+T, and the
// ring is re-laid out (kept keys copied in at most a few runs) when a longer chunk arrives.
// Attention sees every slot with its position (-1 for empty) and masks by window itself.
#include <algorithm>
#include <string>

#include "kv/factory.h"
#include "kv/storage.h"
#include "ops/ops.h"

namespace mlxb::kv {

namespace {

class RotatingCache final : public LayerCache {
 public:
  explicit RotatingCache(const CacheSpec& spec) : spec_(spec) {}

  KVView update(const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t) override {
    check_update(spec_, k, v, pos, t, length_);
    const int64_t need = checked_add(spec_.window - 1, t, "rotating cache size");
    if (need > buf_.capacity) relayout(need);
    std::vector<int32_t> slots(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) {
      const int64_t s = pos[i] % buf_.capacity;
      slots[static_cast<size_t>(i)] = static_cast<int32_t>(s);
      slot_pos_[static_cast<size_t>(s)] = pos[i];
    }
    Tensor slot_t = device_i32(slots.data(), t, spec_.device);
    Tensor kd = buf_.k, vd = buf_.v;
    ops::kv_write(k, slot_t, kd);
    ops::kv_write(v, slot_t, vd);
    length_ += t;
    KVView view;
    view.k = buf_.k_view(buf_.capacity);
    view.v = buf_.v_view(buf_.capacity);
    view.pos = device_i32(slot_pos_.data(), buf_.capacity, spec_.device);
    return view;
  }

  bool device_layout(int64_t t, DeviceLayout& out) override {
    const int64_t need = checked_add(spec_.window - 1, t, "rotating cache size");
    if (need > buf_.capacity) relayout(need);
    out.k = buf_.k;
    out.v = buf_.v;
    out.pos = Tensor();
    out.capacity = buf_.capacity;
    out.ring = true;
    out.host_pos = slot_pos_.data();
    return true;
  }

  void commit(const int32_t* pos, int64_t t) override {
    if (t <= 0 || pos[0] != length_ || t > buf_.capacity - (spec_.window - 1))
      fail(ErrorCode::kInternal, "kv cache: a captured step does not continue the sequence");
    for (int64_t i = 0; i < t; ++i) slot_pos_[static_cast<size_t>(pos[i] % buf_.capacity)] = pos[i];
    length_ += t;
  }

  int64_t length() const override { return length_; }
  int64_t bytes() const override { return buf_.bytes() + buf_.capacity * 4; }
  void reset() override {
    length_ = 0;
    std::fill(slot_pos_.begin(), slot_pos_.end(), -1);
  }

 private:
  // Grows the ring to `cap` slots keeping the last window-1 positions, copied in contiguous runs.
  void relayout(int64_t cap) {
    KVBuffers next;
    next.allocate(spec_, cap);
    std::vector<int32_t> next_pos(static_cast<size_t>(cap), -1);
    std::vector<KVBuffers::Run> runs;
    const int64_t first = std::max<int64_t>(0, length_ - (spec_.window - 1));
    for (int64_t p = first; p < length_; ++p) {
      const int64_t from = p % buf_.capacity, to = p % cap;
      next_pos[static_cast<size_t>(to)] = static_cast<int32_t>(p);
      if (!runs.empty() && runs.back().from + runs.back().n == from && runs.back().to + runs.back().n == to)
        ++runs.back().n;
      else
        runs.push_back({from, to, 1});
    }
    next.copy_runs(buf_, runs, spec_);
    buf_ = std::move(next);
    slot_pos_ = std::move(next_pos);
  }

  CacheSpec spec_;
  KVBuffers buf_;
  std::vector<int32_t> slot_pos_;  // host mirror: position held by each slot, -1 = empty
  int64_t length_ = 0;
};

}  // namespace

std::unique_ptr<LayerCache> make_rotating_cache(const CacheSpec& spec) { return std::make_unique<RotatingCache>(spec); }

}  // namespace mlxb::kv
