// Runner glue: executes a scheduler StepPlan on a Model over the paged KV pool and samples one
// token per finishing row with that sequence's Sampler (engine/sampler.h). The only engine file
// that names Model.
#pragma once
#include <cstdint>
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
  ModelRunner(std::shared_ptr<Model> model, int64_t block_size, int64_t num_blocks);
  // Registers a sequence before it is submitted (any thread). The prompt fills the penalty window.
  void begin(int64_t seq_id, const std::vector<int32_t>& prompt, const SamplingParams& params);
  void run(const StepPlan& plan, StepOutput& out) override;
  void forget(int64_t seq_id) override;
  const PagedKVPool& pool() const { return pool_; }
  const Model& model() const { return *model_; }
  static PagedSpec spec_for(const Model& model, int64_t block_size, int64_t num_blocks);

 private:
  std::shared_ptr<Model> model_;
  PagedKVPool pool_;
  std::mutex mu_;  // guards samplers_ (begin/forget come from other threads)
  std::unordered_map<int64_t, std::shared_ptr<Sampler>> samplers_;
  std::vector<float> logits_;
};

}  // namespace mlxb
