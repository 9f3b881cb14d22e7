// Runner glue: executes a scheduler StepPlan on a Model over the paged KV pool and samples one
// token per finishing row with that sequence's Sampler (engine/sampler.h). The only engine file
// that names Model. Uses the model's batched paged forward when it has one (all rows in one
// pass), else forward_rows over paged caches.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "engine/step.h"
#include "kv/paged.h"
#include "models/model.h"

namespace mlxb {

class ModelRunner : public StepRunner {
 public:
  // batch_invariant: every row's logits equal those it gets alone, also on CUDA (slower; the CPU
  // is batch-invariant anyway). device_argmax: greedy rows without penalties, bias or logprobs
  // take the argmax where the logits are instead of copying them to the host, and on a device
  // model the other rows without logprobs are sampled there too (ops::sample: only tokens come
  // back); false: every row samples from host logits.
  ModelRunner(std::shared_ptr<Model> model, int64_t block_size, int64_t num_blocks, bool batch_invariant = false,
              bool device_argmax = true);
  // Registers a sequence before it is submitted (any thread). The prompt fills the penalty window.
  void begin(int64_t seq_id, const std::vector<int32_t>& prompt, const SamplingParams& params);
  void run(const StepPlan& plan, StepOutput& out) override;
  void forget(int64_t seq_id) override;
  // Pipelined plans (default on CUDA models; MLXB_ENGINE_PIPELINE=0 off, =1 on): single-token rows
  // that are all plain greedy with device_argmax, on a model whose forward_paged_queue takes them
  // (CUDA recorded steps). On a CPU model such a plan runs at once in queue() (fed ids from the
  // plan before), so the engine's pipelined path is tested without a GPU.
  bool queue(const StepPlan& plan, bool fed) override;
  void collect(StepOutput& out) override;
  const PagedKVPool& pool() const { return pool_; }
  const Model& model() const { return *model_; }
  static PagedSpec spec_for(const Model& model, int64_t block_size, int64_t num_blocks);

 private:
  // Row i's sampled token: range-checked, accepted by its sampler, written with its info to `out`.
  void take(Sampler& sampler, const SampleResult& res, size_t i, StepOutput& out) const;
  std::shared_ptr<Model> model_;
  PagedKVPool pool_;
  std::mutex mu_;  // guards samplers_ (begin/forget come from other threads)
  std::unordered_map<int64_t, std::shared_ptr<Sampler>> samplers_;
  std::vector<float> logits_;
  bool batch_invariant_;
  bool device_argmax_;
  bool pipeline_ = false;  // MLXB_ENGINE_PIPELINE, else on for CUDA models
  struct Queued {
    int64_t ticket = -1;                          // forward_paged_queue's; -1: ran at once (`tokens` hold the ids)
    std::vector<std::shared_ptr<Sampler>> samplers;
    std::vector<int32_t> tokens;
  };
  std::deque<Queued> queued_;
};

}  // namespace mlxb
