// Prefix cache index: full KV blocks findable by a chained, domain-separated SHA-256 of
// (model fingerprint, adapter identity, every token so far). Each entry keeps its block's tokens
// and its parent's key so a hit is re-checked rather than trusted to the hash. Unreferenced
// entries sit in an LRU list and are evicted when the budget (a block count) is exceeded or when
// the block manager needs a block. The index stores block ids only; it never touches KV memory.
#pragma once
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sha256.h"

namespace mlxb {

// Key of the block holding tokens[0 .. n) of a block after the blocks keyed by `parent`
// (all-zero digest for the first block).
Digest block_key(const std::string& model_fingerprint, const std::string& adapter, const Digest& parent,
                 const int32_t* tokens, int64_t n);

class PrefixCache {
 public:
  PrefixCache(int64_t capacity, int64_t block_size) : capacity_(capacity), block_size_(block_size) {}
  int64_t capacity() const { return capacity_; }
  int64_t idle_count() const { return static_cast<int64_t>(lru_.size()); }

  // The block for `key` if the entry's parent and tokens equal the arguments, else -1.
  int32_t find(const Digest& key, const Digest& parent, const int32_t* tokens) const;
  bool contains_block(int32_t block) const { return by_block_.count(block) != 0; }
  // Adds an entry for a referenced block; false when the key is already present.
  bool insert(int32_t block, const Digest& key, const Digest& parent, const int32_t* tokens);
  // The block lost its last reference: it becomes evictable (most recently used end).
  void park(int32_t block);
  // The block gained a reference again: it leaves the LRU list.
  void unpark(int32_t block);
  // Removes the least recently used idle entry and returns its block (-1 when none).
  int32_t evict_lru();
  // Idle entries beyond capacity, evicted oldest first; returns their blocks.
  std::vector<int32_t> trim();

 private:
  struct Entry {
    Digest key, parent;
    std::vector<int32_t> tokens;
    bool idle = false;
    std::list<int32_t>::iterator lru_pos;
  };
  void erase(int32_t block);
  int64_t capacity_;
  int64_t block_size_;
  std::unordered_map<Digest, int32_t, DigestHash> by_key_;
  std::unordered_map<int32_t, Entry> by_block_;
  std::list<int32_t> lru_;  // front = least recently used
};

}  // namespace mlxb
