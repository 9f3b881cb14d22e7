// Constructors of the cache legos; callers outside cpp/kv/ use make_layer_cache (cache.h).
#pragma once
#include <memory>

#include "kv/cache.h"

namespace mlxb::kv {
std::unique_ptr<LayerCache> make_contiguous_cache(const CacheSpec& spec);
std::unique_ptr<LayerCache> make_rotating_cache(const CacheSpec& spec);
}  // namespace mlxb::kv
