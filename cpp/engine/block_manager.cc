// Block accounting for the paged KV cache (see block_manager.h).
#include "engine/block_manager.h"

#include <string>

#include "core/error.h"

namespace mlxb {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, int64_t cache_blocks)
    : block_size_(block_size), cache_(cache_blocks < 0 ? 0 : cache_blocks, block_size) {
  if (num_blocks <= 0 || num_blocks > (int64_t(1) << 30)) fail(ErrorCode::kInvalidArgument, "KV block count out of range", "kvBlocks");
  if (block_size <= 0) fail(ErrorCode::kInvalidArgument, "KV block size must be positive", "blockSize");
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Hand out low block ids first (the free list is a stack).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void BlockManager::check(int32_t block) const {
  if (block < 0 || block >= static_cast<int32_t>(refs_.size()))
    fail(ErrorCode::kInternal, "KV block id out of range: " + std::to_string(block));
}

int32_t BlockManager::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = cache_.evict_lru();
    if (b < 0) return -1;
  }
  MLXB_CHECK(refs_[static_cast<size_t>(b)] == 0, "allocated a referenced block");
  refs_[static_cast<size_t>(b)] = 1;
  ++used_;
  return b;
}

int64_t BlockManager::available() const { return static_cast<int64_t>(free_.size()) + cache_.idle_count(); }

void BlockManager::retain(int32_t block) {
  check(block);
  int32_t& r = refs_[static_cast<size_t>(block)];
  if (r == 0) {
    MLXB_CHECK(cache_.contains_block(block), "retained a free block");
    cache_.unpark(block);
    ++used_;
  }
  ++r;
}

void BlockManager::release(int32_t block) {
  check(block);
  int32_t& r = refs_[static_cast<size_t>(block)];
  MLXB_CHECK(r > 0, "released an unreferenced block");
  if (--r > 0) return;
  --used_;
  if (cache_.contains_block(block)) {
    cache_.park(block);
    for (int32_t b : cache_.trim()) free_.push_back(b);
  } else {
    free_.push_back(block);
  }
}

int32_t BlockManager::lookup(const Digest& key, const Digest& parent, const int32_t* tokens) {
  if (!prefix_cache_enabled()) return -1;
  int32_t b = cache_.find(key, parent, tokens);
  if (b >= 0) retain(b);
  return b;
}

void BlockManager::publish(int32_t block, const Digest& key, const Digest& parent, const int32_t* tokens) {
  check(block);
  MLXB_CHECK(refs_[static_cast<size_t>(block)] > 0, "published an unreferenced block");
  cache_.insert(block, key, parent, tokens);
}

BlockCounts BlockManager::counts() const {
  BlockCounts c;
  c.total = static_cast<int64_t>(refs_.size());
  c.free = static_cast<int64_t>(free_.size());
  c.cached = cache_.idle_count();
  c.used = used_;
  return c;
}

}  // namespace mlxb
