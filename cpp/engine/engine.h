// The engine thread: owns a Scheduler and a StepRunner, takes submissions and cancellations from
// any thread, runs one step at a time and hands each step's events to a sink (on the engine
// thread). Knows no model, no tensor and no JS: the addon wires the sink to a thread-safe
// function and the runner to a model.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/scheduler.h"

namespace mlxb {

using EventSink = std::function<void(std::vector<StepEvent>&& events, bool last)>;

struct EngineStats {
  SchedulerStats sched;
  double tokens_per_second = 0;   // generated tokens over the last few seconds
  double ms_since_progress = 0;   // since the last completed step (or since start/idle)
  bool closed = false;
};

class Engine {
 public:
  // `sink` receives every step's events; its final call has last == true (thread exiting).
  Engine(const SchedulerOptions& options, std::unique_ptr<StepRunner> runner, EventSink sink);
  ~Engine();  // aborts what is left and joins
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws kBusy (queue full), kInvalidArgument (prompt cannot fit) or kAborted (closed).
  void submit(SeqRequest request);
  void cancel(int64_t seq_id);
  // Stops accepting work. abort: every request ends with kAbort at the next step; otherwise the
  // queued and running requests finish first. The thread then exits after a last sink call.
  void close(bool abort);
  void join();
  EngineStats stats();

 private:
  void loop();
  std::unique_ptr<StepRunner> runner_;
  EventSink sink_;
  std::mutex mu_;
  std::condition_variable cv_;
  Scheduler sched_;
  bool closing_ = false;
  bool finished_ = false;
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_progress_;
  std::deque<std::pair<Clock::time_point, int64_t>> rate_window_;  // (time, generated total)
  std::thread thread_;
};

}  // namespace mlxb
