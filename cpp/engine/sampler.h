// Token sampling next to the logits: one Sampler per sequence holds the options, the recent-token
// window the penalties read and a seeded random generator. The chain, in order:
//   logit bias -> repetition / presence / frequency penalties over the window ("processed logits";
//   logprobs are log-softmax of these) -> temperature == 0: argmax (lowest id on ties)
//   | otherwise logits / temperature -> top-k -> top-p -> min-p -> draw from the renormalised rest.
// Each filter sees the distribution the previous one left (renormalised); ties in ranking go to
// the lower token id, so results do not depend on sort stability. Options arrive validated from
// TypeScript (lib/sampling); the constructor re-checks ranges and throws kInvalidArgument.
// Not here: grammar masks, batching; this is one row at a time on host memory. Device sampling
// (ops::sample, one launch for a batch of rows) uses device_args / device_done below: the same
// chain where the logits are, with the uniform this sampler would draw next, so a seeded request
// picks the same tokens on both (up to ties at float rounding). Requests with logprobs stay here.
#pragma once
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "ops/ops.h"

namespace mlxb {

struct SamplingParams {
  double temperature = 1.0;          // 0 = greedy
  int64_t top_k = 0;                 // 0 = off
  double top_p = 1.0;                // 1 = off
  double min_p = 0.0;                // 0 = off
  double repetition_penalty = 1.0;   // 1 = off
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  int64_t penalty_window = 64;       // last N tokens (prompt included) the penalties look at
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool has_seed = false;
  uint64_t seed = 0;
  bool logprobs = false;             // compute SampleResult::logprob (a pass over the vocabulary)
  int64_t top_logprobs = 0;          // alternatives reported per token (implies logprobs)
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.f;                 // of `token` under the processed logits (0 unless asked)
  std::vector<TokenLogprob> top;       // top_logprobs best alternatives, best first
};

// Device sampling is on unless MLXB_DEVICE_SAMPLING=0 (read once).
bool device_sampling_enabled();

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t vocab);

  const SamplingParams& params() const { return params_; }
  int64_t vocab() const { return vocab_; }

  // Adds tokens the model has seen (prompt or generated) to the penalty window.
  void accept(int32_t token);
  void accept(const int32_t* tokens, int64_t n);
  void reset_history();

  // In place: logit bias, then penalties from the current window.
  void process(float* logits) const;
  // The final distribution the draw uses (after process, temperature and filters), as
  // probabilities over the whole vocabulary (zeros outside the kept set). Greedy: one-hot.
  std::vector<float> distribution(const float* logits) const;
  // Processes a copy of `logits`, draws a token and reports its log-probabilities. Does not
  // accept the token: the caller does once it is committed.
  SampleResult sample(const float* logits);

  // Whether this request can be sampled on the device (no logprobs, top-k off or <=
  // kDeviceMaxTopK, bias token ids unique) - and device sampling is not switched off
  // (MLXB_DEVICE_SAMPLING=0).
  bool device_ok() const { return device_ok_; }
  // Greedy with nothing that reads the logits beyond their argmax (no penalties, bias or
  // logprobs): the token is Model::forward_argmax's.
  bool plain_greedy() const;
  // The arguments of the next draw for ops::sample: bias and penalty counts as special tokens
  // (into `special`; args.special is left for the caller to point at it), and the uniform the
  // next host draw would use (peeked: the generator moves only in device_done).
  SampleArgs device_args(std::vector<SampleSpecial>& special) const;
  // Takes the device result of those arguments: advances the generator when the draw used the
  // uniform, throws the host's kInternal errors for NaN / all -inf logits. Returns the token.
  // Does not accept the token (as sample()).
  int32_t device_done(const SampleOut& out);

 private:
  // Kept candidates (token, unnormalised weight) after temperature and filters: the first n
  // entries of `out` (n returned; `out` only grows, its storage is reused between calls).
  size_t candidates(const float* processed, std::vector<std::pair<int32_t, double>>& out) const;

  SamplingParams params_;
  int64_t vocab_;
  bool device_ok_ = false;
  std::vector<int32_t> bias_ids_;  // logit_bias token ids, sorted
  Rng rng_;
  std::deque<int32_t> window_;
  std::unordered_map<int32_t, int32_t> counts_;  // occurrences inside window_
  // Scratch kept between calls so a draw allocates nothing (a sampler serves one sequence).
  std::vector<float> work_;                                    // processed copy of the logits
  std::vector<std::pair<int32_t, double>> cand_;               // sample()'s candidates
  mutable std::vector<std::pair<int32_t, double>> select_;     // top-p selection
  mutable std::vector<double> mass_;                           // top-p weight histogram
};

}  // namespace mlxb
