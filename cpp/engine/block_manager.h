// KV block accounting for the paged cache: which of the pool's fixed-size blocks are free, used
// by running rows (reference-counted, shared when a prefix is reused) or cached (unreferenced but
// holding a published prefix, evictable in LRU order). Knows no tensor and no model: the paged
// KV lego (kv/paged.h) owns the storage, this owns the numbers.
//
// Invariant: free + cached + used == total, and used == 0 whenever no row holds a block, so at
// idle free + cached == total.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/prefix_cache.h"

namespace mlxb {

struct BlockCounts {
  int64_t total = 0, free = 0, used = 0, cached = 0;
};

class BlockManager {
 public:
  // `cache_blocks`: most unreferenced blocks kept for prefix reuse (0 = prefix cache off).
  BlockManager(int64_t num_blocks, int64_t block_size, int64_t cache_blocks);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  bool prefix_cache_enabled() const { return cache_.capacity() > 0; }

  // A fresh block (ref 1): from the free list, else by evicting the least recently used cached
  // block. -1 when every block is referenced.
  int32_t allocate();
  // How many blocks allocate() could hand out now.
  int64_t available() const;
  void retain(int32_t block);
  // Drops one reference; at zero the block becomes cached (if published) or free.
  void release(int32_t block);

  // Prefix reuse. `key` chains the parent's key (see block_key); a hit re-checks the stored
  // tokens and parent key, takes a reference and returns the block, else -1.
  int32_t lookup(const Digest& key, const Digest& parent, const int32_t* tokens);
  // Makes a fully computed block findable. No-op when the cache is off or the key is present.
  void publish(int32_t block, const Digest& key, const Digest& parent, const int32_t* tokens);

  BlockCounts counts() const;
  int64_t ref_count(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }

 private:
  void check(int32_t block) const;
  int64_t block_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
  int64_t used_ = 0;
  PrefixCache cache_;
};

}  // namespace mlxb
