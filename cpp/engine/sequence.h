// One generation request's native state: the model's KV caches for this sequence, its sampler and
// a logits buffer. prefill() runs the prompt and samples the first token; step() feeds back the
// last sampled token and samples the next, so each generated token is one call (forward + sample)
// with no logits crossing into JS. On a device model only the token crosses to the host (device
// sampling, unless the request asks for logprobs: those sample from host logits). Not
// thread-safe: one call at a time (the addon enforces it).
// live() counts sequences alive in the process so tests can see that state is released.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "models/model.h"

namespace mlxb {

class Sequence {
 public:
  // `max_tokens` bounds prompt + generated tokens (cache capacity).
  Sequence(std::shared_ptr<Model> model, const SamplingParams& params, int64_t max_tokens);
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Runs the prompt in chunks of at most `chunk` tokens; samples the token after it.
  SampleResult prefill(const int32_t* ids, int64_t n, int64_t chunk = 512);
  // Commits `token` (the last sampled one), runs it and samples the next.
  SampleResult step(int32_t token);
  // Up to `count` steps in one call, as step() each (the first commits `token`, each later one
  // the token sampled before it), ending after a token in `stop` (sorted) or at the capacity.
  // Plain greedy on a device model runs them through Model::greedy_steps, which queues each
  // step before it reads the token before it: a stop token then has one more step run after
  // it, and the sequence has ended (later steps are refused).
  std::vector<SampleResult> steps(int32_t token, int64_t count, const std::vector<int32_t>& stop);

  int64_t length() const { return length_; }
  int64_t capacity() const { return max_tokens_; }
  const Sampler& sampler() const { return sampler_; }

  static int64_t live();

 private:
  void check(const int32_t* ids, int64_t t) const;  // capacity and token ids
  void admit(int32_t token) const;                   // what a step of `token` needs: prefill done, not ended, check()
  // Both below run ids that check() has already accepted (prefill and step check once).
  void forward(const int32_t* ids, int64_t t);
  // Runs ids and samples the token after them: on the device (Model::forward_sample) when the
  // sampler allows it and the model has such a path, else host logits + Sampler::sample.
  SampleResult forward_sample(const int32_t* ids, int64_t t);

  std::shared_ptr<Model> model_;
  int64_t max_tokens_;
  CacheSet caches_;
  Sampler sampler_;
  std::vector<float> logits_;
  int64_t length_ = 0;
  bool ended_ = false;  // steps() ran past a stop token
};

}  // namespace mlxb
