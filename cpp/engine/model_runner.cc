// Runner glue (see model_runner.h).
#include "engine/model_runner.h"

#include "core/error.h"

namespace mlxb {

int32_t GreedySampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>&) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

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

ModelRunner::ModelRunner(std::shared_ptr<Model> model, int64_t block_size, int64_t num_blocks)
    : model_(std::move(model)), pool_(spec_for(*model_, block_size, num_blocks)) {}

void ModelRunner::begin(int64_t seq_id, const std::vector<int32_t>& prompt, std::unique_ptr<TokenSampler> sampler) {
  auto st = std::make_shared<SeqState>();
  st->sampler = sampler ? std::move(sampler) : std::make_unique<GreedySampler>();
  st->history = prompt;
  std::lock_guard<std::mutex> lock(mu_);
  seqs_[seq_id] = std::move(st);
}

void ModelRunner::forget(int64_t seq_id) {
  std::lock_guard<std::mutex> lock(mu_);
  seqs_.erase(seq_id);
}

void ModelRunner::run(const StepPlan& plan, StepOutput& out) {
  const int64_t vocab = model_->config().vocab_size;
  const size_t n = plan.rows.size();
  out.tokens.assign(n, -1);
  logits_.resize(n * static_cast<size_t>(vocab));
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
  }
  model_->forward_rows(rows);
  for (size_t i = 0; i < n; ++i) {
    const StepRow& r = plan.rows[i];
    if (!r.sample) continue;
    std::shared_ptr<SeqState> st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = seqs_.find(r.seq_id);
      MLXB_CHECK(it != seqs_.end(), "runner has no state for a planned sequence");
      st = it->second;
    }
    const int32_t tok = st->sampler->sample(rows[i].logits, vocab, st->history);
    if (tok < 0 || tok >= vocab) fail(ErrorCode::kInternal, "sampler returned a token outside the vocabulary");
    st->history.push_back(tok);
    out.tokens[i] = tok;
  }
}

}  // namespace mlxb
