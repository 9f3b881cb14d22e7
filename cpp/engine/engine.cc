// Engine thread loop (see engine.h). The lock guards the scheduler; the runner's step runs
// without it so submissions and cancellations never wait for a step.
#include "engine/engine.h"

#include "core/error.h"

namespace mlxb {

Engine::Engine(const SchedulerOptions& options, std::unique_ptr<StepRunner> runner, EventSink sink)
    : runner_(std::move(runner)), sink_(std::move(sink)), sched_(options), last_progress_(Clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  close(true);
  join();
}

void Engine::submit(SeqRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) fail(ErrorCode::kAborted, "the engine is closed");
  if (sched_.idle()) last_progress_ = Clock::now();
  sched_.add(std::move(request));
  cv_.notify_one();
}

void Engine::cancel(int64_t seq_id) {
  std::lock_guard<std::mutex> lock(mu_);
  sched_.cancel(seq_id);
  cv_.notify_one();
}

void Engine::close(bool abort) {
  std::lock_guard<std::mutex> lock(mu_);
  closing_ = true;
  if (abort) sched_.cancel_all();
  cv_.notify_one();
}

void Engine::join() {
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s;
  s.sched = sched_.stats();
  const auto now = Clock::now();
  s.ms_since_progress = std::chrono::duration<double, std::milli>(now - last_progress_).count();
  if (rate_window_.size() >= 2) {
    const auto& a = rate_window_.front();
    const auto& b = rate_window_.back();
    const double dt = std::chrono::duration<double>(b.first - a.first).count();
    if (dt > 0 && std::chrono::duration<double>(now - b.first).count() < 5.0)
      s.tokens_per_second = static_cast<double>(b.second - a.second) / dt;
  }
  s.closed = closing_;
  return s;
}

// With a runner that pipelines (StepRunner::queue), the step after a queued one is planned on the
// guess that none of its rows ends (Scheduler::plan_ahead) and queued before the loop waits for
// the first one's tokens, so the device goes on while the host completes a step and hands its
// events over. A guess that fails costs one dropped token per ended row.
void Engine::loop() {
  StepPlan plan, ahead;
  StepOutput out;
  bool queued = false;  // `plan` (an earlier `ahead`) is queued on the runner
  for (;;) {
    std::vector<StepEvent> events;
    bool have_step = queued;
    if (!queued) {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        have_step = sched_.plan(plan, events);
        if (have_step || !events.empty()) break;
        if (closing_ && sched_.idle()) break;
        last_progress_ = Clock::now();
        cv_.wait(lock);
      }
    }
    if (have_step) {
      std::string error;
      bool ahead_queued = false, collected = false;
      try {
        if (!queued) queued = runner_->queue(plan, false);
        if (queued) {
          bool planned = false;
          {
            std::lock_guard<std::mutex> lock(mu_);
            planned = !closing_ && sched_.plan_ahead(plan, ahead);
          }
          if (planned) ahead_queued = runner_->queue(ahead, true);
          collected = true;  // collect takes the step off the runner's queue even when it throws
          runner_->collect(out);
        } else {
          out.tokens.assign(plan.rows.size(), -1);
          runner_->run(plan, out);
        }
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "the model step failed";
      }
      if (!error.empty()) {  // drain the runner's queue; the rows end with the error below
        for (int k = (queued && !collected ? 1 : 0) + (ahead_queued ? 1 : 0); k > 0; --k) {
          try {
            runner_->collect(out);
          } catch (const std::exception&) {
          }
        }
        ahead_queued = false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (error.empty()) sched_.complete(plan, out, events);
      else sched_.fail_step(plan, error, events);
      const auto now = Clock::now();
      last_progress_ = now;
      rate_window_.emplace_back(now, sched_.stats().generated_tokens);
      while (rate_window_.size() > 2 && now - rate_window_.front().first > std::chrono::seconds(3))
        rate_window_.pop_front();
      queued = ahead_queued;
      if (queued) std::swap(plan, ahead);
    }
    for (const StepEvent& e : events)
      if (e.finish != FinishReason::kNone) runner_->forget(e.seq_id);
    bool exiting = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      exiting = !queued && closing_ && sched_.idle();
      finished_ = exiting;
    }
    if (!events.empty() || exiting) sink_(std::move(events), exiting);
    if (exiting) return;
  }
}

}  // namespace mlxb
