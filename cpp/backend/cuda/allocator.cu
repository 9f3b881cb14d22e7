// Caching device allocator. Freed blocks are kept in per-size free lists and handed out again
// without cudaMalloc/cudaFree (both synchronise the device). Sizes are rounded (512 B below
// 1 MiB, 2 MiB above) so that activations of nearby sizes share blocks. All work runs on one
// stream, so a block freed on the host may be reused by later work on that stream at once.
// When cudaMalloc fails the cache is emptied and the call retried; a second failure is
// kOutOfMemory naming the size and the free memory.
// While a thread captures a graph (graph.cu) its allocations come from that graph's Arena instead:
// chunks carved in order, freed blocks reused within the capture, everything released together.
// Debugging reads of memory nothing wrote (MLXB_CUDA_ALLOC_DEBUG): "nocache" gives every block
// back with cudaFree (so compute-sanitizer's initcheck sees each tensor's memory as new), "poison"
// fills every block outside captures with 0xff bytes (NaN in every float type) before handing it out.
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"

namespace mlxb::cuda {

namespace {
struct Pool {
  std::mutex mu;
  std::multimap<int64_t, void*> free_blocks;      // rounded size -> block
  std::unordered_map<void*, int64_t> live;       // block -> rounded size
  int64_t cached_bytes = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: blocks may be freed during static teardown
  return *p;
}

int64_t round_size(int64_t bytes) {
  const int64_t mib = 1 << 20;
  if (bytes < mib) return (bytes + 511) / 512 * 512;
  return (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);
}

std::string mib(int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; }

[[noreturn]] void out_of_memory(int64_t bytes, const char* what) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  fail(ErrorCode::kOutOfMemory, std::string("CUDA out of memory: ") + what + " needs " + mib(bytes) + " of device memory; " +
                                    mib(static_cast<int64_t>(free_b)) + " free of " + mib(static_cast<int64_t>(total_b)),
       what);
}

thread_local Arena* t_arena = nullptr;

enum class AllocDebug { kOff, kNoCache, kPoison };
AllocDebug alloc_debug() {
  static const AllocDebug d = [] {
    const char* v = std::getenv("MLXB_CUDA_ALLOC_DEBUG");
    if (v && std::string(v) == "nocache") return AllocDebug::kNoCache;
    if (v && std::string(v) == "poison") return AllocDebug::kPoison;
    return AllocDebug::kOff;
  }();
  return d;
}

void release_cache_locked(Pool& p) {
  if (p.free_blocks.empty()) return;
  cudaStreamSynchronize(main_stream());
  for (auto& [size, ptr] : p.free_blocks) cudaFree(ptr);
  p.free_blocks.clear();
  p.cached_bytes = 0;
}
}  // namespace

struct Arena {
  static constexpr int64_t kChunk = 32 << 20;
  std::vector<void*> chunks;
  char* cur = nullptr;
  int64_t left = 0;
  std::multimap<int64_t, void*> free_blocks;
  std::unordered_map<void*, int64_t> live;

  void* alloc(int64_t bytes, const char* what) {
    const int64_t size = (bytes + 255) / 256 * 256;
    auto it = free_blocks.find(size);
    if (it != free_blocks.end()) {
      void* p = it->second;
      free_blocks.erase(it);
      live[p] = size;
      return p;
    }
    if (size > left) {
      const int64_t chunk = size > kChunk ? size : kChunk;
      void* c = nullptr;
      if (cudaMalloc(&c, static_cast<size_t>(chunk)) != cudaSuccess) {
        cudaGetLastError();
        out_of_memory(size, what);
      }
      chunks.push_back(c);
      cur = static_cast<char*>(c);
      left = chunk;
    }
    void* p = cur;
    cur += size;
    left -= size;
    live[p] = size;
    return p;
  }
  // The first chunk, taken before a capture starts (no cudaMalloc inside the common case).
  void prime() {
    if (chunks.empty()) free(alloc(kChunk / 2, "a graph's arena"));
  }
  bool free(void* p) {
    auto it = live.find(p);
    if (it == live.end()) return false;
    free_blocks.emplace(it->second, p);
    live.erase(it);
    return true;
  }
};

Arena* arena_create() {
  Arena* a = new Arena();
  try {
    a->prime();
  } catch (...) {
    delete a;
    throw;
  }
  return a;
}
void arena_destroy(Arena* a) {
  if (!a) return;
  for (void* c : a->chunks) cudaFree(c);
  delete a;
}
void set_thread_arena(Arena* a) { t_arena = a; }

static void* pool_alloc(int64_t bytes, const char* what) {
  int64_t size = round_size(bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  // A cached block of the same size, or up to 1/8 larger for big blocks.
  auto it = p.free_blocks.lower_bound(size);
  if (it != p.free_blocks.end() && it->first <= size + size / 8) {
    void* ptr = it->second;
    int64_t got = it->first;
    p.free_blocks.erase(it);
    p.cached_bytes -= got;
    p.live[ptr] = got;
    return ptr;
  }
  void* ptr = nullptr;
  cudaError_t e = cudaMalloc(&ptr, static_cast<size_t>(size));
  if (e != cudaSuccess) {
    cudaGetLastError();
    release_cache_locked(p);
    e = cudaMalloc(&ptr, static_cast<size_t>(size));
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    out_of_memory(bytes, what);
  }
  p.live[ptr] = size;
  return ptr;
}

void* device_alloc(int64_t bytes, const char* what) {
  if (bytes <= 0) bytes = 1;
  if (t_arena) return t_arena->alloc(bytes, what);
  void* ptr = pool_alloc(bytes, what);
  if (alloc_debug() == AllocDebug::kPoison) MLXB_CUDA_OK(cudaMemsetAsync(ptr, 0xff, static_cast<size_t>(bytes), main_stream()));
  return ptr;
}

void device_free(void* ptr) {
  if (!ptr) return;
  if (t_arena && t_arena->free(ptr)) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.live.find(ptr);
  if (it == p.live.end()) return;
  int64_t size = it->second;
  p.live.erase(it);
  if (alloc_debug() == AllocDebug::kNoCache) {
    cudaStreamSynchronize(main_stream());
    cudaFree(ptr);
    return;
  }
  p.free_blocks.emplace(size, ptr);
  p.cached_bytes += size;
}

void* CudaBackend::alloc(int64_t bytes) { return device_alloc(bytes, "a tensor"); }
void CudaBackend::free(void* p) { device_free(p); }

}  // namespace mlxb::cuda
