// Paged KV lego: one pool of fixed-size blocks per layer shared by every sequence of an engine,
// and a LayerCache that reads one sequence's block table. Block ids come from the engine's block
// manager; this file only stores and gathers.
//
// Layout per layer: K and V tensors [Hkv, num_blocks * block_size, D] (dim-0 stride covers the
// whole pool), so the slot of position p is table[p / block_size] * block_size + p % block_size
// and ops::kv_write writes new tokens in place. update() returns a gathered contiguous view of
// the sequence's positions [0, length) in order, which attention reads like a contiguous cache.
// Deliberately not here: a block-table-reading attention kernel (the gather is the first step).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/cache.h"

namespace mlxb {

struct PagedSpec {
  Device device = Device::kCPU;
  DType dtype = DType::F32;
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
};

class PagedKVPool {
 public:
  explicit PagedKVPool(const PagedSpec& spec);
  const PagedSpec& spec() const { return spec_; }
  int64_t bytes() const { return bytes_; }
  static int64_t bytes_per_block(const PagedSpec& spec);  // all layers, K and V
  Tensor& keys(int64_t layer) { return k_.at(static_cast<size_t>(layer)); }
  Tensor& values(int64_t layer) { return v_.at(static_cast<size_t>(layer)); }

 private:
  PagedSpec spec_;
  std::vector<Tensor> k_, v_;
  int64_t bytes_ = 0;
};

// One layer of one sequence over the pool. The block table must cover every position written;
// the caller (the engine's runner) guarantees it and the cache checks it.
class PagedLayerCache : public LayerCache {
 public:
  PagedLayerCache(PagedKVPool& pool, int64_t layer, const std::vector<int32_t>& table, int64_t length);
  KVView update(const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t) override;
  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  void reset() override { length_ = 0; }

 private:
  Tensor gather(const Tensor& pool, int64_t n) const;
  PagedKVPool& pool_;
  int64_t layer_;
  const std::vector<int32_t>& table_;
  int64_t length_;
};

// A cache set for one sequence: one PagedLayerCache per layer.
CacheSet make_paged_caches(PagedKVPool& pool, const std::vector<int32_t>& table, int64_t length);

}  // namespace mlxb
