// Shared plumbing of the cache legos: a pair of [Hkv, capacity, D] key/value buffers on the
// cache's device, a host mirror of the position held by each slot, and the small i32 tensors
// (slots, positions) that ops need on the device. Not a cache itself: contiguous.cc and
// rotating.cc decide which slot each position goes to.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/cache.h"

namespace mlxb::kv {

// An i32 tensor on `device` holding `values` (copied from the host).
Tensor device_i32(const int32_t* values, int64_t n, Device device);

// Checks the tensors handed to LayerCache::update against the spec; returns T.
int64_t check_update(const CacheSpec& spec, const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t,
                     int64_t expected_first);

struct KVBuffers {
  Tensor k, v;            // [Hkv, capacity, D]
  int64_t capacity = 0;

  void allocate(const CacheSpec& spec, int64_t capacity);
  // Copies slot runs from `old` into this buffer: for each (from, to, n), slots [from, from+n) of
  // `old` land in [to, to+n) of this one, for every head.
  struct Run { int64_t from, to, n; };
  void copy_runs(const KVBuffers& old, const std::vector<Run>& runs, const CacheSpec& spec);
  // Slots [0, n) of every head as contiguous host tensors [Hkv, n, D] (a saved state), and back.
  void to_host(int64_t n, const CacheSpec& spec, Tensor& k_out, Tensor& v_out) const;
  void from_host(const Tensor& k_in, const Tensor& v_in, int64_t n, const CacheSpec& spec);
  // Views [Hkv, s, D] of the first `s` slots (dim-0 stride = capacity * D).
  Tensor k_view(int64_t s) const;
  Tensor v_view(int64_t s) const;
  int64_t bytes() const { return (k.defined() ? k.nbytes() : 0) + (v.defined() ? v.nbytes() : 0); }
};

}  // namespace mlxb::kv
