// Per-thread scratch memory for kernels: 64-byte aligned, grows on demand and is kept for the
// thread's lifetime, so a matmul does not allocate and page-fault megabytes on every call.
// Slot 0: buffers the calling thread packs for a whole op; slot 1: per-worker panel buffers.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace mlxb::cpu {

template <typename T>
T* scratch(size_t n, int slot) {
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf bufs[2];
  Buf& b = bufs[slot];
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  if (b.cap < bytes) {
    std::free(b.p);
    b.p = std::aligned_alloc(64, bytes);
    b.cap = b.p ? bytes : 0;
    if (!b.p) throw std::bad_alloc();
  }
  return static_cast<T*>(b.p);
}

}  // namespace mlxb::cpu
