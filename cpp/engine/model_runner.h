// Runner glue: executes a scheduler StepPlan on a Model over the paged KV pool and samples one
// token per finishing row with that sequence's sampler. The only engine file that names Model.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/step.h"
#include "kv/paged.h"
#include "models/model.h"

namespace mlxb {

// Per-sequence token choice from one row of float32 logits. `history` holds the prompt and every
// token sampled so far (for penalties).
class TokenSampler {
 public:
  virtual ~TokenSampler() = default;
  virtual int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history) = 0;
};

// argmax, lowest index on ties.
class GreedySampler : public TokenSampler {
 public:
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history) override;
};

class ModelRunner : public StepRunner {
 public:
  ModelRunner(std::shared_ptr<Model> model, int64_t block_size, int64_t num_blocks);
  // Registers a sequence before it is submitted (any thread).
  void begin(int64_t seq_id, const std::vector<int32_t>& prompt, std::unique_ptr<TokenSampler> sampler);
  void run(const StepPlan& plan, StepOutput& out) override;
  void forget(int64_t seq_id) override;
  const PagedKVPool& pool() const { return pool_; }
  static PagedSpec spec_for(const Model& model, int64_t block_size, int64_t num_blocks);

 private:
  struct SeqState {
    std::unique_ptr<TokenSampler> sampler;
    std::vector<int32_t> history;
  };
  std::shared_ptr<Model> model_;
  PagedKVPool pool_;
  std::mutex mu_;  // guards seqs_ (begin/forget come from other threads)
  std::unordered_map<int64_t, std::shared_ptr<SeqState>> seqs_;
  std::vector<float> logits_;
};

}  // namespace mlxb
