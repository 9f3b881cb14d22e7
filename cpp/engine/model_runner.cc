// Runner glue (see model_runner.h).
#include "engine/model_runner.h"

#include <cstdlib>

#include "core/error.h"

namespace mlxb {

PagedSpec ModelRunner::spec_for(const Model& model, int64_t block_size, int64_t num_blocks) {
  const ModelConfig& c = model.config();
  PagedSpec s;
  s.device = model.device();
  s.dtype = model.kv_dtype();
  s.layers = c.num_layers;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.block_size = block_size;
  s.num_blocks = num_blocks;
  return s;
}

ModelRunner::ModelRunner(std::shared_ptr<Model> model, int64_t block_size, int64_t num_blocks, bool batch_invariant,
                         bool device_argmax)
    : model_(std::move(model)),
      pool_(spec_for(*model_, block_size, num_blocks)),
      batch_invariant_(batch_invariant),
      device_argmax_(device_argmax) {
  // On by default where it pays (CUDA: the host's part of a step overlaps the GPU's); =0 turns it
  // off, =1 also runs the pipelined path on a CPU model (tests).
  const char* e = std::getenv("MLXB_ENGINE_PIPELINE");
  pipeline_ = e && *e ? e[0] == '1' : model_->device() == Device::kCUDA;
}

void ModelRunner::begin(int64_t seq_id, const std::vector<int32_t>& prompt, const SamplingParams& params) {
  auto s = std::make_shared<Sampler>(params, model_->config().vocab_size);
  s->accept(prompt.data(), static_cast<int64_t>(prompt.size()));
  std::lock_guard<std::mutex> lock(mu_);
  samplers_[seq_id] = std::move(s);
}

void ModelRunner::forget(int64_t seq_id) {
  std::lock_guard<std::mutex> lock(mu_);
  samplers_.erase(seq_id);
}

void ModelRunner::run(const StepPlan& plan, StepOutput& out) {
  const int64_t vocab = model_->config().vocab_size;
  const size_t n = plan.rows.size();
  out.tokens.assign(n, -1);
  out.samples.assign(n, SampleInfo{});
  std::vector<std::shared_ptr<Sampler>> samplers(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      if (!plan.rows[i].sample) continue;
      auto it = samplers_.find(plan.rows[i].seq_id);
      MLXB_CHECK(it != samplers_.end(), "runner has no sampler for a planned sequence");
      samplers[i] = it->second;
    }
  }
  logits_.resize(n * static_cast<size_t>(vocab));
  std::vector<int32_t> argmax(n, -1);
  // Device sampling (a device model, a request without logprobs): only the token comes back.
  const bool on_device = model_->device() != Device::kCPU;
  std::vector<SampleArgs> sample(n);
  std::vector<std::vector<SampleSpecial>> special(n);
  std::vector<SampleOut> sampled(n);
  std::vector<Model::PagedRow> paged(n);
  for (size_t i = 0; i < n; ++i) {
    const StepRow& r = plan.rows[i];
    paged[i].ids = r.tokens;
    paged[i].t = r.count;
    paged[i].start = r.start;
    paged[i].blocks = r.blocks;
    if (!r.sample) continue;
    if (device_argmax_ && samplers[i]->plain_greedy()) {
      paged[i].argmax = &argmax[i];
    } else if (device_argmax_ && on_device && samplers[i]->device_ok()) {
      sample[i] = samplers[i]->device_args(special[i]);
      sample[i].special = special[i].data();
      paged[i].sample = &sample[i];
      paged[i].sampled = &sampled[i];
    } else {
      paged[i].logits = logits_.data() + i * static_cast<size_t>(vocab);
    }
  }
  if (!model_->forward_paged(pool_, paged, batch_invariant_)) {
    std::vector<CacheSet> caches(n);
    std::vector<Model::Row> rows(n);
    for (size_t i = 0; i < n; ++i) {
      const StepRow& r = plan.rows[i];
      caches[i] = make_paged_caches(pool_, *r.blocks, r.start);
      rows[i].ids = r.tokens;
      rows[i].t = r.count;
      rows[i].caches = &caches[i];
      rows[i].logits = logits_.data() + i * static_cast<size_t>(vocab);
      rows[i].all_rows = false;
      paged[i].argmax = nullptr;
      paged[i].sample = nullptr;
    }
    model_->forward_rows(rows);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!plan.rows[i].sample) continue;
    Sampler& sampler = *samplers[i];
    SampleResult res;
    if (paged[i].argmax) res.token = argmax[i];
    else if (paged[i].sample) res.token = sampler.device_done(sampled[i]);
    else res = sampler.sample(logits_.data() + i * static_cast<size_t>(vocab));
    take(sampler, res, i, out);
  }
}

void ModelRunner::take(Sampler& sampler, const SampleResult& res, size_t i, StepOutput& out) const {
  if (res.token < 0 || res.token >= model_->config().vocab_size)
    fail(ErrorCode::kInternal, "sampler returned a token outside the vocabulary");
  sampler.accept(res.token);
  out.tokens[i] = res.token;
  SampleInfo& info = out.samples[i];
  info.logprob = res.logprob;
  for (const TokenLogprob& t : res.top) {
    info.top_tokens.push_back(t.token);
    info.top_logprobs.push_back(t.logprob);
  }
}

bool ModelRunner::queue(const StepPlan& plan, bool fed) {
  if (!pipeline_ || !device_argmax_ || plan.rows.empty()) return false;
  const bool on_device = model_->device() != Device::kCPU;
  const size_t n = plan.rows.size();
  if (fed && (queued_.empty() || queued_.back().samplers.size() != n)) return false;
  Queued q;
  q.samplers.resize(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      const StepRow& r = plan.rows[i];
      if (!r.sample || r.count != 1 || (!fed && !r.tokens)) return false;
      auto it = samplers_.find(r.seq_id);
      MLXB_CHECK(it != samplers_.end(), "runner has no sampler for a planned sequence");
      if (!it->second->plain_greedy()) return false;
      q.samplers[i] = it->second;
    }
  }
  std::vector<int32_t> ids(n, 0), argmax(n, -1);
  if (fed && queued_.back().ticket < 0) ids = queued_.back().tokens;  // the step before ran at once
  std::vector<Model::PagedRow> paged(n);
  for (size_t i = 0; i < n; ++i) {
    const StepRow& r = plan.rows[i];
    paged[i].ids = fed ? ids.data() + i : r.tokens;
    paged[i].t = 1;
    paged[i].start = r.start;
    paged[i].blocks = r.blocks;
    paged[i].argmax = &argmax[i];
  }
  q.ticket = model_->forward_paged_queue(pool_, paged, batch_invariant_, fed);
  if (q.ticket < 0) {
    // A device model whose step cannot be queued now: the engine runs it after collecting. On the
    // CPU (MLXB_ENGINE_PIPELINE=1) the step runs here, so that collect only hands its ids over.
    if (on_device || (fed && queued_.back().ticket >= 0)) return false;
    if (!model_->forward_paged(pool_, paged, batch_invariant_)) return false;
    q.tokens = argmax;
  }
  queued_.push_back(std::move(q));
  return true;
}

void ModelRunner::collect(StepOutput& out) {
  MLXB_CHECK(!queued_.empty(), "runner: collect without a queued step");
  Queued q = std::move(queued_.front());
  queued_.pop_front();
  const size_t n = q.samplers.size();
  if (q.ticket >= 0) {
    q.tokens.assign(n, -1);
    model_->forward_paged_collect(q.ticket, q.tokens.data(), static_cast<int64_t>(n));
  }
  out.tokens.assign(n, -1);
  out.samples.assign(n, SampleInfo{});
  for (size_t i = 0; i < n; ++i) {
    SampleResult res;
    res.token = q.tokens[i];
    take(*q.samplers[i], res, i, out);
  }
}

}  // namespace mlxb
