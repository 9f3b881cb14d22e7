// Prefix cache index (see prefix_cache.h).
#include "engine/prefix_cache.h"

#include <cstring>

#include "core/error.h"

namespace mlxb {

Digest block_key(const std::string& model_fingerprint, const std::string& adapter, const Digest& parent,
                 const int32_t* tokens, int64_t n) {
  Sha256 h;
  h.update_field("mlxb.kv-prefix-block.v1");
  h.update_field(model_fingerprint);
  h.update_field(adapter);
  h.update(parent.data(), static_cast<int64_t>(parent.size()));
  h.update_u64(static_cast<uint64_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[i]);
    uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    h.update(b, 4);
  }
  return h.finish();
}

int32_t PrefixCache::find(const Digest& key, const Digest& parent, const int32_t* tokens) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Entry& e = by_block_.at(it->second);
  if (e.parent != parent) return -1;
  if (std::memcmp(e.tokens.data(), tokens, static_cast<size_t>(block_size_) * sizeof(int32_t)) != 0) return -1;
  return it->second;
}

bool PrefixCache::insert(int32_t block, const Digest& key, const Digest& parent, const int32_t* tokens) {
  if (capacity_ <= 0 || by_key_.count(key) || by_block_.count(block)) return false;
  Entry e;
  e.key = key;
  e.parent = parent;
  e.tokens.assign(tokens, tokens + block_size_);
  by_block_.emplace(block, std::move(e));
  by_key_.emplace(key, block);
  return true;
}

void PrefixCache::park(int32_t block) {
  Entry& e = by_block_.at(block);
  MLXB_CHECK(!e.idle, "prefix block parked twice");
  e.idle = true;
  e.lru_pos = lru_.insert(lru_.end(), block);
}

void PrefixCache::unpark(int32_t block) {
  Entry& e = by_block_.at(block);
  if (!e.idle) return;
  lru_.erase(e.lru_pos);
  e.idle = false;
}

void PrefixCache::erase(int32_t block) {
  auto it = by_block_.find(block);
  if (it == by_block_.end()) return;
  if (it->second.idle) lru_.erase(it->second.lru_pos);
  by_key_.erase(it->second.key);
  by_block_.erase(it);
}

int32_t PrefixCache::evict_lru() {
  if (lru_.empty()) return -1;
  int32_t b = lru_.front();
  erase(b);
  return b;
}

std::vector<int32_t> PrefixCache::trim() {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(lru_.size()) > capacity_) out.push_back(evict_lru());
  return out;
}

}  // namespace mlxb
