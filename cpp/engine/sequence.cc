// Prefill / step of one sequence (sequence.h).
#include "engine/sequence.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "core/error.h"

namespace mlxb {

static std::atomic<int64_t> g_live{0};

int64_t Sequence::live() { return g_live.load(); }

Sequence::Sequence(std::shared_ptr<Model> model, const SamplingParams& params, int64_t max_tokens)
    : model_(std::move(model)),
      max_tokens_(max_tokens),
      sampler_(params, model_ ? model_->config().vocab_size : 0) {
  if (!model_) fail(ErrorCode::kInvalidArgument, "no model", "model");
  if (max_tokens <= 0) fail(ErrorCode::kInvalidArgument, "max_tokens must be > 0", "maxTokens");
  caches_ = model_->make_caches(max_tokens);
  logits_.resize(static_cast<size_t>(model_->config().vocab_size));
  ++g_live;
}

Sequence::~Sequence() { --g_live; }

void Sequence::check(const int32_t* ids, int64_t t) const {
  if (length_ + t > max_tokens_) {
    fail(ErrorCode::kInvalidArgument, "sequence would exceed its capacity of " + std::to_string(max_tokens_) + " tokens", "maxTokens");
  }
  const int64_t vocab = model_->config().vocab_size;
  for (int64_t i = 0; i < t; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      fail(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[i]) + " is outside the vocabulary (" + std::to_string(vocab) + ")", "input");
    }
  }
}

void Sequence::forward(const int32_t* ids, int64_t t) {
  model_->forward(ids, t, caches_, logits_.data(), false);
  length_ += t;
}

SampleResult Sequence::forward_sample(const int32_t* ids, int64_t t) {
  if (sampler_.device_ok() && model_->device() != Device::kCPU) {
    std::vector<SampleSpecial> special;
    SampleArgs args = sampler_.device_args(special);
    args.special = special.data();
    SampleOut out;
    if (model_->forward_sample(ids, t, caches_, args, out)) {
      length_ += t;
      SampleResult r;
      r.token = sampler_.device_done(out);
      return r;
    }
  }
  forward(ids, t);
  return sampler_.sample(logits_.data());
}

SampleResult Sequence::prefill(const int32_t* ids, int64_t n, int64_t chunk) {
  if (n <= 0) fail(ErrorCode::kInvalidArgument, "the prompt is empty", "input");
  if (length_ != 0) fail(ErrorCode::kInvalidArgument, "prefill on a sequence that already ran", "input");
  chunk = std::max<int64_t>(1, chunk);
  check(ids, n);
  int64_t off = 0;
  for (; n - off > chunk; off += chunk) forward(ids + off, chunk);
  sampler_.accept(ids, n);
  return forward_sample(ids + off, n - off);
}

void Sequence::admit(int32_t token) const {
  if (length_ == 0) fail(ErrorCode::kInvalidArgument, "step before prefill", "input");
  if (ended_) fail(ErrorCode::kInvalidArgument, "the sequence has ended at a stop token", "input");
  check(&token, 1);
}

SampleResult Sequence::step(int32_t token) {
  admit(token);
  sampler_.accept(token);
  return forward_sample(&token, 1);
}

std::vector<SampleResult> Sequence::steps(int32_t token, int64_t count, const std::vector<int32_t>& stop) {
  if (count < 1) fail(ErrorCode::kInvalidArgument, "count must be at least 1", "count");
  auto stops = [&](int32_t t) { return std::binary_search(stop.begin(), stop.end(), t); };
  std::vector<SampleResult> out;
  if (model_->device() == Device::kCPU || !sampler_.plain_greedy()) {
    for (int64_t i = 0; i < count && length_ < max_tokens_; ++i) {
      out.push_back(step(i == 0 ? token : out.back().token));
      if (stops(out.back().token)) break;
    }
    if (out.empty()) out.push_back(step(token));  // at the capacity: step() says so
    return out;
  }
  admit(token);
  count = std::min(count, max_tokens_ - length_);
  std::vector<int32_t> toks(static_cast<size_t>(count));
  model_->greedy_steps(token, count, caches_, toks.data());
  length_ += count;
  sampler_.accept(token);
  for (int64_t i = 0; i < count; ++i) {
    SampleResult r;
    r.token = toks[static_cast<size_t>(i)];
    out.push_back(r);
    if (i + 1 < count) sampler_.accept(r.token);
    if (stops(r.token)) {
      ended_ = i + 1 < count;
      break;
    }
  }
  return out;
}

}  // namespace mlxb
