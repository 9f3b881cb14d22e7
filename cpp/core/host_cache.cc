// host_cache.h: a size-keyed free list under a byte budget.
#include "core/host_cache.h"

#include <cstdint>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>

namespace mlxb {
namespace {

constexpr size_t kMinBytes = size_t{256} << 10;

struct Cache {
  std::mutex mu;
  size_t budget = 0, held = 0;
  std::list<std::pair<size_t, void*>> order;                                   // oldest first
  std::multimap<size_t, std::list<std::pair<size_t, void*>>::iterator> by_size;  // size -> entry

  Cache() {
    long mb = 256;
    if (const char* v = std::getenv("MLXB_HOST_CACHE_MB")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0) mb = n;
    }
    budget = static_cast<size_t>(mb) << 20;
  }
  void evict_oldest() {  // mu held, order non-empty
    auto [bytes, p] = order.front();
    for (auto it = by_size.lower_bound(bytes); it != by_size.end() && it->first == bytes; ++it)
      if (it->second == order.begin()) { by_size.erase(it); break; }
    order.pop_front();
    held -= bytes;
    std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: blocks may be freed during static teardown
  return *c;
}

}  // namespace

void* host_alloc(size_t bytes) {
  if (bytes >= kMinBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.by_size.find(bytes);
    if (it != c.by_size.end()) {
      void* p = it->second->second;
      c.order.erase(it->second);
      c.by_size.erase(it);
      c.held -= bytes;
      return p;
    }
  }
  return std::aligned_alloc(64, bytes);
}

void host_free(void* p, size_t bytes) {
  if (!p) return;
  Cache& c = cache();
  if (bytes < kMinBytes || bytes > c.budget) {
    std::free(p);
    return;
  }
  std::lock_guard<std::mutex> lock(c.mu);
  while (c.held + bytes > c.budget) c.evict_oldest();
  c.order.emplace_back(bytes, p);
  c.by_size.emplace(bytes, std::prev(c.order.end()));
  c.held += bytes;
}

}  // namespace mlxb
