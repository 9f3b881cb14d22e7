// Software prefetch of the next block of weight rows in the GEMV kernels.
//
// A GEMV block streams RB weight rows at once; the hardware prefetcher follows each row only
// after several lines, and rows of 1 KB or less (a tiny model's LM head: K = 256 bf16) end before
// it locks on. So every full block but the last prefetches the next block (`bytes` from `next`,
// contiguous) a few cache lines per step of its k loop (`steps` in all): into L1 when the block is
// short (measured with the AVX2 kernels on the tiny shape: its bf16 LM head ran at ~14 GB/s
// without it, decode went from 174 to 400 tok/s with it), into L2 when it is longer than L1 can
// hold beside the block being read (Llama-3.2-1B shape on a 2-core Zen 4, bf16-dot GEMV,
// cpu_decode_bench bf16: median 84.5 -> 78.1 ms per token of matmuls over 5 alternating runs,
// ~32 GB/s = the machine's read bandwidth). gemv_blocks is the block loop both GEMVs
// (matmul_avx2.cc, matmul_ordered.h) run, which decides when a block prefetches.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace mlxb::cpu {

constexpr int64_t kShortRowBytes = 1024;
constexpr int64_t kL1Block = 8 * 1024;  // a prefetched block larger than this goes to L2

struct NextBlock {
  NextBlock(const char* next, int64_t bytes, int64_t steps)
      : next_(next), lines_(next ? (bytes + 63) / 64 : 0),
        per_step_(next ? (lines_ + steps - 1) / std::max<int64_t>(1, steps) : 0), to_l1_(bytes <= kL1Block) {}
  void step() {
    const int64_t e = std::min(lines_, line_ + per_step_);
    if (to_l1_)
      for (; line_ < e; ++line_) __builtin_prefetch(next_ + line_ * 64, 0, 3);
    else
      for (; line_ < e; ++line_) __builtin_prefetch(next_ + line_ * 64, 0, 2);
  }
  const char* next_;
  int64_t lines_, per_step_, line_ = 0;
  bool to_l1_;
};

// The blocks of a GEMV over the n weight rows of w (k elements of es bytes each), spread over
// threads: full(r0, next) for each full block of RB rows starting at row r0, with next = the
// following block's rows when a full block follows (to prefetch), else nullptr; then rest(r)
// for each row of a final partial block.
template <int RB, typename Full, typename Rest>
void gemv_blocks(const void* w, int64_t n, int64_t k, int64_t es, const Full& full, const Rest& rest) {
  const int64_t blocks = (n + RB - 1) / RB;
  parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * RB;
      if (r0 + RB <= n) {
        const bool pf = r0 + 2 * RB <= n;
        full(r0, pf ? static_cast<const char*>(w) + (r0 + RB) * k * es : nullptr);
      } else {
        for (int64_t r = r0; r < n; ++r) rest(r);
      }
    }
  });
}

}  // namespace mlxb::cpu
