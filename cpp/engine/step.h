// The plain-data contract between the scheduler and whatever runs the model (DESIGN.md rule 5):
// the scheduler decides which rows advance by how many tokens and where their KV blocks are; the
// runner computes, samples and knows nothing of queues or budgets.
#pragma once
#include <cstdint>
#include <vector>

namespace mlxb {

struct StepRow {
  int64_t seq_id = 0;
  const int32_t* tokens = nullptr;  // the `count` tokens at positions [start, start + count)
  int64_t start = 0;
  int64_t count = 0;
  // This chunk reaches the end of the known tokens: the runner samples the next token from the
  // logits of its last position. Otherwise (a prefill chunk) only the KV is written.
  bool sample = false;
  const std::vector<int32_t>* blocks = nullptr;  // block table covering positions [0, start + count)
};

struct StepPlan {
  std::vector<StepRow> rows;
  int64_t prefill_tokens = 0;  // tokens in non-final chunks plus prompt chunks (for stats)
};

// What the runner reports about a sampled token beyond its id (passed through to the caller).
struct SampleInfo {
  float logprob = 0.f;               // under the processed logits
  std::vector<int32_t> top_tokens;   // best alternatives when asked, best first
  std::vector<float> top_logprobs;
};

struct StepOutput {
  std::vector<int32_t> tokens;      // one per plan row: the sampled token, or -1 where !sample
  std::vector<SampleInfo> samples;  // one per plan row (empty info where !sample)
};

// What the engine drives. `begin` / `forget` bracket a sequence's life so the runner can keep
// per-sequence state (sampler, RNG); `run` executes one plan.
// Pipelining (optional): `queue` starts a plan and returns without waiting for its tokens (false:
// this runner or this plan cannot, and nothing was started; the caller uses `run` once it has
// collected what is queued). With `fed`, row i's token is the one row i of the plan queued just
// before samples (StepRow::tokens is not read; same rows in the same order). `collect` waits
// for the oldest queued plan and fills its output.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual void run(const StepPlan& plan, StepOutput& out) = 0;
  virtual void forget(int64_t seq_id) = 0;
  virtual bool queue(const StepPlan& plan, bool fed) {
    (void)plan;
    (void)fed;
    return false;
  }
  virtual void collect(StepOutput& out) { (void)out; }
};

}  // namespace mlxb
