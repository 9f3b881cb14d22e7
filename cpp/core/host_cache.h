// Reuse of large host buffers. A prefill allocates the same activation sizes layer after layer
// (a 1B model at 512 tokens: ~46 MB of matmul outputs per layer); fresh memory from the C
// library comes from mmap and is zeroed by the kernel page by page at first touch (tens of
// thousands of faults per prefill). Freed blocks of at least kMinBytes are kept, keyed by their
// exact size, up to a budget (MLXB_HOST_CACHE_MB, default 256; 0 turns it off), oldest evicted
// first. Thread-safe; contents of a reused block are unspecified, like malloc's.
#pragma once
#include <cstddef>

namespace mlxb {

// A 64-byte aligned block of `bytes` (already a multiple of 64); nullptr when out of memory.
void* host_alloc(size_t bytes);
// Returns a block from host_alloc of the same size.
void host_free(void* p, size_t bytes);

}  // namespace mlxb
