// A fixed pool of worker threads sized to the machine (MLXB_NUM_THREADS overrides) running
// data-parallel loops. parallel_for blocks the calling thread until all chunks finish; callers
// are native worker threads, never the JS thread.
#pragma once
#include <cstdint>
#include <functional>

namespace mlxb {

int num_threads();
void set_num_threads(int n);

// Splits [0, n) into contiguous ranges of at least `grain` items and runs fn(begin, end) on the
// pool (the caller takes part). Nested calls run inline.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace mlxb
