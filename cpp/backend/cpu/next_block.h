// Software prefetch of the next block of weight rows in the GEMV kernels.
//
// Weight rows of 1 KB or less (a tiny model's LM head: K = 256 bf16) end before the hardware
// prefetcher locks on, so a GEMV block of such rows prefetches the next block (`bytes` from
// `next`, contiguous) a few cache lines per step of its k loop (`steps` in all). Measured with the
// AVX2 kernels on the tiny shape: its bf16 LM head ran at ~14 GB/s without it, and decode went
// from 174 to 400 tok/s with it.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mlxb::cpu {

constexpr int64_t kShortRowBytes = 1024;

struct NextBlock {
  NextBlock(const char* next, int64_t bytes, int64_t steps)
      : next_(next), lines_(next ? (bytes + 63) / 64 : 0),
        per_step_(next ? (lines_ + steps - 1) / std::max<int64_t>(1, steps) : 0) {}
  void step() {
    for (const int64_t e = std::min(lines_, line_ + per_step_); line_ < e; ++line_) __builtin_prefetch(next_ + line_ * 64, 0, 3);
  }
  const char* next_;
  int64_t lines_, per_step_, line_ = 0;
};

}  // namespace mlxb::cpu
