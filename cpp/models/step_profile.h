// Diagnostics of the engine's batched steps on stderr, chosen by MLXB_ENGINE_PROFILE when the
// first step runs: 1 = host phases of each paged step (planning + uploads, queueing the work,
// waiting for the results) and the host time between steps; 2 = also the time of each group of
// ops, synchronising the device after each group (slower, and no recorded steps). Averages are
// printed every 32 steps. Only the engine thread calls it (the model's forward lock).
#pragma once
#include <chrono>
#include <cstdint>

#include "core/tensor.h"

namespace mlxb {

class StepProfile {
 public:
  using Clock = std::chrono::steady_clock;
  enum Group { kNorm, kQkv, kRopeKv, kAttn, kOut, kGateUp, kDown, kHead, kGroups };

  static StepProfile& get();
  int level() const { return level_; }
  // Level 2: starts timing op groups of a step on `device`.
  void begin(Device device);
  // Level 2: the time since the last mark (once the device has finished it) goes to group g.
  void mark(Group g);
  // One step of `rows` rows: t0 start, t1 inputs uploaded, t2 work queued, t3 results on the host.
  void step(int64_t rows, bool replayed, Clock::time_point t0, Clock::time_point t1, Clock::time_point t2,
            Clock::time_point t3);

 private:
  void reset();
  int level_ = 0;
  Device device_ = Device::kCPU;
  int64_t steps_ = 0, rows_ = 0, replays_ = 0;
  double prep_ = 0, queue_ = 0, wait_ = 0, gap_ = 0, group_[kGroups] = {};
  Clock::time_point last_end_{}, mark_{};
};

}  // namespace mlxb
