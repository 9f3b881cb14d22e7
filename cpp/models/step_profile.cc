// Step diagnostics (see step_profile.h).
#include "models/step_profile.h"

#include <cstdio>
#include <cstdlib>

#include "ops/ops.h"

namespace mlxb {

namespace {
double us(StepProfile::Clock::time_point a, StepProfile::Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
}  // namespace

StepProfile& StepProfile::get() {
  static StepProfile* p = [] {
    auto* q = new StepProfile();
    if (const char* v = std::getenv("MLXB_ENGINE_PROFILE")) q->level_ = std::atoi(v);
    return q;
  }();
  return *p;
}

void StepProfile::begin(Device device) {
  if (level_ < 2) return;
  device_ = device;
  backend(device_).synchronize();
  mark_ = Clock::now();
}

void StepProfile::mark(Group g) {
  if (level_ < 2) return;
  backend(device_).synchronize();
  const auto now = Clock::now();
  group_[g] += us(mark_, now);
  mark_ = now;
}

void StepProfile::reset() {
  steps_ = rows_ = replays_ = 0;
  prep_ = queue_ = wait_ = gap_ = 0;
  for (double& g : group_) g = 0;
}

void StepProfile::step(int64_t rows, bool replayed, Clock::time_point t0, Clock::time_point t1, Clock::time_point t2,
                       Clock::time_point t3) {
  if (level_ < 1) return;
  if (last_end_ != Clock::time_point{}) gap_ += us(last_end_, t0);
  last_end_ = t3;
  ++steps_;
  rows_ += rows;
  replays_ += replayed ? 1 : 0;
  prep_ += us(t0, t1);
  queue_ += us(t1, t2);
  wait_ += us(t2, t3);
  if (steps_ % 32 != 0) return;
  const double n = static_cast<double>(steps_);
  std::fprintf(stderr,
               "mlxb profile: %lld steps, %.1f rows/step, %lld replayed; us/step: prep %.0f queue %.0f wait %.0f "
               "(forward %.0f), between steps %.0f",
               static_cast<long long>(steps_), static_cast<double>(rows_) / n, static_cast<long long>(replays_), prep_ / n,
               queue_ / n, wait_ / n, (prep_ + queue_ + wait_) / n, gap_ / n);
  if (level_ >= 2)
    std::fprintf(stderr, "; ops us/step: norm+embed %.0f qkv %.0f rope+kv %.0f attn %.0f o %.0f gate_up+act %.0f down %.0f head %.0f",
                 group_[kNorm] / n, group_[kQkv] / n, group_[kRopeKv] / n, group_[kAttn] / n, group_[kOut] / n,
                 group_[kGateUp] / n, group_[kDown] / n, group_[kHead] / n);
  std::fprintf(stderr, "\n");
  reset();
}

}  // namespace mlxb
