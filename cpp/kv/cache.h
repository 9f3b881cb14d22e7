// The one KV-cache interface every storage lego implements (contiguous, rotating, later paged and
// quantized). One LayerCache per attention layer of one sequence. `update` is the only call that
// mutates; everything else reads. Models and the scheduler never name a concrete class: they get
// caches from the factory functions below (or a future paged block manager).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace mlxb {

// What attention reads after an update: keys/values [Hkv, S, D] (dim-0 stride may exceed S*D)
// and the position held by each of the S slots (i32 [S], < 0 = empty), all on the cache's device.
struct KVView {
  Tensor k, v, pos;
};

class LayerCache {
 public:
  virtual ~LayerCache() = default;
  // Stores keys/values [T, Hkv, D] of tokens at positions `pos` (host array of T, increasing,
  // continuing the sequence). Returns the view attention must use for those T queries, which
  // includes every earlier key they may see (for a rotating cache, at least window-1 older keys).
  virtual KVView update(const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t) = 0;
  virtual int64_t length() const = 0;   // tokens seen so far (next position)
  virtual int64_t bytes() const = 0;    // memory held
  virtual void reset() = 0;
  // Whether truncate(length) would succeed: length <= length(), and this storage still holds what
  // attention at position `length` reads (a rotating cache may have overwritten it; the default
  // says no).
  virtual bool can_truncate(int64_t length) const { (void)length; return false; }
  // Forgets every token at position >= length (speculative decoding's rollback). Only after
  // can_truncate(length) said yes.
  virtual void truncate(int64_t length) { (void)length; fail(ErrorCode::kUnsupported, "this KV cache cannot be truncated"); }

  // --- saved states (a session written to a file and read back). save_state: keys/values of
  // positions [0, length()) as contiguous host tensors [Hkv, length(), D] in the cache dtype;
  // false when this storage cannot give them all (a rotating cache keeps only its window).
  // load_state: replaces everything with such tensors (checked against the cache's own shape
  // and dtype: a typed error when they differ); false when this storage cannot.
  virtual bool save_state(Tensor& k, Tensor& v) const { (void)k; (void)v; return false; }
  virtual bool load_state(const Tensor& k, const Tensor& v) { (void)k; (void)v; return false; }

  // --- captured decode steps (models/decode_graph.h). Optional; the defaults opt out.
  // The whole buffers a recorded step writes and reads: k/v [Hkv, capacity, D]; position p goes
  // to slot p (contiguous) or p % capacity (ring). For a contiguous cache `pos` is i32
  // [capacity] with pos[s] = s on the device; a ring leaves it undefined and points `host_pos`
  // at its host mirror of the position held by each slot (-1 = empty), valid until the next call.
  struct DeviceLayout {
    Tensor k, v, pos;
    int64_t capacity = 0;
    bool ring = false;
    const int32_t* host_pos = nullptr;
  };
  // Makes room for `t` more tokens without moving anything later (growing geometrically), and
  // describes the buffers. false: this cache cannot serve captured steps (use update()).
  virtual bool device_layout(int64_t t, DeviceLayout& out) { (void)t; (void)out; return false; }
  // Host bookkeeping after a recorded step stored keys/values of `t` tokens at positions `pos`
  // (continuing the sequence) into the buffers of device_layout().
  virtual void commit(const int32_t* pos, int64_t t) { (void)pos; (void)t; }
};

struct CacheSpec {
  Device device = Device::kCPU;
  DType dtype = DType::F32;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_tokens = 0;  // capacity bound for contiguous caches (grows in chunks up to this)
  int64_t window = 0;      // > 0: rotating cache keeping the last `window` positions
};

std::unique_ptr<LayerCache> make_layer_cache(const CacheSpec& spec);

using CacheSet = std::vector<std::unique_ptr<LayerCache>>;

}  // namespace mlxb
