// Continuous-batching policy: admission from a bounded queue, chunked prefill interleaved with
// decode, KV blocks per row with prefix reuse, preemption by recompute under KV pressure and
// cancellation. Sees only token ids, counts and block ids (no model, no tensor). Single-threaded:
// the engine serialises calls and never runs plan() / complete() concurrently with add/cancel.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/step.h"

namespace mlxb {

struct SchedulerOptions {
  int64_t max_rows = 8;           // rows advanced in one step
  int64_t max_queue = 64;         // requests waiting for admission (beyond: kBusy)
  int64_t block_size = 16;        // tokens per KV block
  int64_t num_blocks = 0;         // KV pool size in blocks
  int64_t prefix_cache_blocks = 0;  // unreferenced blocks kept for reuse (0 = prefix cache off)
  int64_t prefill_chunk = 256;    // most prompt tokens of one row in one step
  int64_t prefill_budget = 256;   // most prefill tokens of all rows in one step (>= one chunk runs)
  int64_t max_context = 0;        // most tokens (prompt + generated) of one sequence
  std::string fingerprint;        // model identity for prefix keys
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);

struct SeqRequest {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 0;
  std::vector<int32_t> stop_tokens;  // the sampled stop token is reported, then the row ends
  std::string adapter;               // adapter identity for prefix keys ("" = none)
};

struct StepEvent {
  int64_t seq_id = 0;
  int32_t token = -1;  // -1: no token in this event (an abort or an error)
  FinishReason finish = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  int64_t generated = 0;      // tokens sampled so far, this one included
  SampleInfo sample;          // the runner's report on `token`
  std::string error;
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  BlockCounts blocks;
  int64_t steps = 0, generated_tokens = 0, prefill_tokens = 0, cached_tokens = 0, preemptions = 0;
  int64_t steps_ahead = 0;  // steps planned by plan_ahead (pipelined) that ran
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);
  ~Scheduler();

  // Queues a request. Throws kBusy when the queue is full, kInvalidArgument when the prompt can
  // never fit (context or KV pool).
  void add(SeqRequest request);
  // Marks a request cancelled; it leaves (blocks freed, kAbort event) at the next plan().
  void cancel(int64_t seq_id);
  // Finishes every request with kAbort at the next plan().
  void cancel_all();
  bool idle() const;
  int64_t waiting() const;

  // Applies cancellations, then builds the next step. Events for requests that ended without a
  // step (aborts, requests that cannot fit) are appended to `events`. False when nothing runs.
  bool plan(StepPlan& plan, std::vector<StepEvent>& events);
  // Pipelining: plans the step after `pending` (planned, not yet completed) on the guess that
  // none of its rows ends there: the same rows in the same order, one position on, tokens fed by
  // the runner (StepRow::tokens null). False (nothing planned) unless `pending` advances every
  // running row by one sampled token, none can end by length there, no cancellation is pending,
  // no waiting request could be admitted, and the rows' next blocks can be had.
  bool plan_ahead(const StepPlan& pending, StepPlan& next);
  // Applies the runner's output for a plan: appends sampled tokens, publishes newly complete
  // blocks, ends finished rows. Rows of sequences that ended before (a plan_ahead step whose
  // guess failed) are skipped: their tokens are dropped.
  void complete(const StepPlan& plan, const StepOutput& out, std::vector<StepEvent>& events);
  // The runner failed on the last plan: every row in it ends with kError.
  void fail_step(const StepPlan& plan, const std::string& message, std::vector<StepEvent>& events);

  SchedulerStats stats() const;
  const BlockManager& blocks() const { return blocks_; }

 private:
  struct Seq;
  Seq* find_running(int64_t id);
  bool ensure_blocks(Seq& s, int64_t tokens);
  void admit_prefix(Seq& s);
  void release(Seq& s);
  void preempt(Seq& s);
  void finish(Seq& s, FinishReason reason, std::vector<StepEvent>& events, const std::string& error = {});
  void publish_full_blocks(Seq& s);
  bool plan_once(StepPlan& plan, std::vector<StepEvent>& events);

  SchedulerOptions opt_;
  BlockManager blocks_;
  std::deque<std::unique_ptr<Seq>> waiting_;    // front = next to admit
  std::vector<std::unique_ptr<Seq>> running_;   // admission order (oldest first)
  std::vector<std::unique_ptr<Seq>> done_;      // finished during the last plan, kept alive until complete()
  std::unordered_map<int64_t, bool> cancelled_;
  bool cancel_all_ = false;
  SchedulerStats totals_;
};

}  // namespace mlxb
