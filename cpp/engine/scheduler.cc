// Continuous-batching policy (see scheduler.h). One step = decode rows first (every running row
// with one token left), then prefill chunks of running rows within the step's prefill budget, then
// admissions. A row's prefill chunks are cut the same way whatever else runs (min(remaining,
// prefill_chunk)), so a row's computation does not depend on its neighbours.
#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace mlxb {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

struct Scheduler::Seq {
  SeqRequest req;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  int64_t computed = 0;         // positions whose KV is in the blocks
  int64_t generated = 0;
  int64_t cached_tokens = 0;    // prefix-cache hit at first admission
  bool admitted_once = false;
  bool done = false;
  bool preempted = false;
  std::vector<int32_t> table;   // block table
  std::vector<Digest> keys;     // prefix keys of the leading full blocks
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - computed; }
};

Scheduler::Scheduler(const SchedulerOptions& options)
    : opt_(options), blocks_(options.num_blocks, options.block_size, options.prefix_cache_blocks) {
  if (opt_.max_rows <= 0) fail(ErrorCode::kInvalidArgument, "maxRows must be positive", "maxRows");
  if (opt_.max_queue < 0) fail(ErrorCode::kInvalidArgument, "maxQueue must not be negative", "maxQueue");
  if (opt_.prefill_chunk <= 0) fail(ErrorCode::kInvalidArgument, "prefillChunk must be positive", "prefillChunk");
  if (opt_.prefill_budget < opt_.prefill_chunk) opt_.prefill_budget = opt_.prefill_chunk;
  if (opt_.max_context <= 1) fail(ErrorCode::kInvalidArgument, "maxContext must exceed 1", "maxContext");
}

Scheduler::~Scheduler() = default;

void Scheduler::add(SeqRequest request) {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) fail(ErrorCode::kInvalidArgument, "the prompt has no tokens", "prompt");
  if (n >= opt_.max_context)
    fail(ErrorCode::kInvalidArgument,
         "the prompt has " + std::to_string(n) + " tokens; the context holds " + std::to_string(opt_.max_context) +
             " including at least one generated token",
         "prompt");
  if ((n + 1 + opt_.block_size - 1) / opt_.block_size > blocks_.num_blocks())
    fail(ErrorCode::kInvalidArgument,
         "the prompt has " + std::to_string(n) + " tokens; the KV pool holds " +
             std::to_string(blocks_.num_blocks() * opt_.block_size),
         "prompt");
  if (request.max_new_tokens <= 0) fail(ErrorCode::kInvalidArgument, "maxTokens must be positive", "maxTokens");
  if (static_cast<int64_t>(waiting_.size()) >= opt_.max_queue)
    fail(ErrorCode::kBusy, "the request queue is full (" + std::to_string(opt_.max_queue) + " waiting)", "maxQueue");
  auto s = std::make_unique<Seq>();
  s->tokens = request.prompt;
  s->req = std::move(request);
  waiting_.push_back(std::move(s));
}

void Scheduler::cancel(int64_t seq_id) { cancelled_[seq_id] = true; }
void Scheduler::cancel_all() { cancel_all_ = true; }
bool Scheduler::idle() const { return running_.empty() && waiting_.empty(); }
int64_t Scheduler::waiting() const { return static_cast<int64_t>(waiting_.size()); }

Scheduler::Seq* Scheduler::find_running(int64_t id) {
  for (auto& s : running_)
    if (s->req.id == id) return s.get();
  return nullptr;
}

bool Scheduler::ensure_blocks(Seq& s, int64_t tokens) {
  const int64_t need = (tokens + opt_.block_size - 1) / opt_.block_size;
  while (static_cast<int64_t>(s.table.size()) < need) {
    int32_t b = blocks_.allocate();
    if (b < 0) return false;
    s.table.push_back(b);
  }
  return true;
}

void Scheduler::admit_prefix(Seq& s) {
  s.computed = 0;
  if (!blocks_.prefix_cache_enabled()) return;
  const int64_t bs = opt_.block_size;
  const int64_t max_full = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;  // keep >= 1 token to run
  Digest parent{};
  for (int64_t i = 0; i < max_full; ++i) {
    const int32_t* t = s.tokens.data() + i * bs;
    Digest key = block_key(opt_.fingerprint, s.req.adapter, parent, t, bs);
    int32_t b = blocks_.lookup(key, parent, t);
    if (b < 0) break;
    s.table.push_back(b);
    s.keys.push_back(key);
    parent = key;
  }
  s.computed = static_cast<int64_t>(s.table.size()) * bs;
}

void Scheduler::release(Seq& s) {
  for (int32_t b : s.table) blocks_.release(b);
  s.table.clear();
  s.keys.clear();
  s.computed = 0;
}

void Scheduler::preempt(Seq& s) {
  release(s);
  s.preempted = true;
  ++totals_.preemptions;
}

void Scheduler::finish(Seq& s, FinishReason reason, std::vector<StepEvent>& events, const std::string& error) {
  release(s);
  s.done = true;
  StepEvent e;
  e.seq_id = s.req.id;
  e.finish = reason;
  e.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  e.cached_tokens = s.cached_tokens;
  e.generated = s.generated;
  e.error = error;
  events.push_back(std::move(e));
}

void Scheduler::publish_full_blocks(Seq& s) {
  if (!blocks_.prefix_cache_enabled()) return;
  const int64_t bs = opt_.block_size;
  const int64_t full = std::min<int64_t>(s.computed / bs, static_cast<int64_t>(s.table.size()));
  while (static_cast<int64_t>(s.keys.size()) < full) {
    const int64_t i = static_cast<int64_t>(s.keys.size());
    Digest parent = i == 0 ? Digest{} : s.keys.back();
    const int32_t* t = s.tokens.data() + i * bs;
    Digest key = block_key(opt_.fingerprint, s.req.adapter, parent, t, bs);
    blocks_.publish(s.table[static_cast<size_t>(i)], key, parent, t);
    s.keys.push_back(key);
  }
}

bool Scheduler::plan(StepPlan& plan, std::vector<StepEvent>& events) {
  plan.rows.clear();
  plan.prefill_tokens = 0;
  for (auto& s : running_)
    if (cancel_all_ || cancelled_.count(s->req.id)) finish(*s, FinishReason::kAbort, events);
  for (auto& s : waiting_)
    if (cancel_all_ || cancelled_.count(s->req.id)) finish(*s, FinishReason::kAbort, events);
  cancelled_.clear();
  cancel_all_ = false;
  auto gone = [](const std::unique_ptr<Seq>& s) { return s->done; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());
  // A step with no row while rows are running means prefill chunks found no blocks: make room
  // by preempting the youngest row, then try again.
  while (!plan_once(plan, events)) {
    if (running_.empty()) return false;
    preempt(*running_.back());
    waiting_.push_front(std::move(running_.back()));
    running_.pop_back();
    waiting_.front()->preempted = false;
  }
  return !plan.rows.empty();
}

bool Scheduler::plan_ahead(const StepPlan& pending, StepPlan& next) {
  next.rows.clear();
  next.prefill_tokens = 0;
  if (cancel_all_ || !cancelled_.empty() || pending.rows.size() != running_.size()) return false;
  if (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opt_.max_rows) return false;
  std::vector<Seq*> seqs;
  seqs.reserve(pending.rows.size());
  for (const StepRow& r : pending.rows) {
    Seq* s = find_running(r.seq_id);
    if (!s || s->done || !r.sample || r.count != 1 || s->computed != r.start) return false;
    // The pending step's token ends the row by length: nothing to guess.
    if (s->generated + 1 >= s->req.max_new_tokens || static_cast<int64_t>(s->tokens.size()) + 1 >= opt_.max_context)
      return false;
    seqs.push_back(s);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    StepRow n = pending.rows[i];
    if (!ensure_blocks(s, n.start + 2)) return false;  // blocks taken so far are the rows' next ones anyway
    n.tokens = nullptr;
    n.start += 1;
    n.blocks = &s.table;
    next.rows.push_back(n);
  }
  return true;
}

bool Scheduler::plan_once(StepPlan& plan, std::vector<StepEvent>& events) {
  plan.rows.clear();
  plan.prefill_tokens = 0;
  bool preempted_now = false;
  auto add_row = [&](Seq& s, int64_t count) {
    StepRow r;
    r.seq_id = s.req.id;
    r.tokens = s.tokens.data() + s.computed;
    r.start = s.computed;
    r.count = count;
    r.sample = s.computed + count == static_cast<int64_t>(s.tokens.size());
    r.blocks = &s.table;
    plan.rows.push_back(r);
  };

  // 1. Decode rows, oldest first. Under KV pressure the youngest unplanned row is preempted.
  for (size_t i = 0; i < running_.size(); ++i) {
    Seq& s = *running_[i];
    if (s.preempted || s.remaining() != 1) continue;
    bool ok = ensure_blocks(s, s.computed + 1);
    while (!ok) {
      size_t victim = running_.size();
      for (size_t j = running_.size(); j-- > i + 1;)
        if (!running_[j]->preempted) { victim = j; break; }
      if (victim == running_.size()) break;
      preempt(*running_[victim]);
      preempted_now = true;
      ok = ensure_blocks(s, s.computed + 1);
    }
    if (ok) { add_row(s, 1); continue; }
    bool others = false;
    for (size_t j = 0; j < i; ++j) others = others || !running_[j]->preempted;
    if (others) {
      preempt(s);
      preempted_now = true;
    } else {
      finish(s, FinishReason::kLength, events);  // the pool cannot hold this sequence alone
    }
  }
  // Preempted rows go back to the front of the queue, oldest first.
  for (size_t j = running_.size(); j-- > 0;) {
    if (!running_[j]->preempted) continue;
    running_[j]->preempted = false;
    waiting_.push_front(std::move(running_[j]));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Seq>& s) { return !s || s->done; }),
                 running_.end());

  // 2. Prefill chunks of running rows within the step's budget.
  int64_t budget_used = 0;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.remaining() <= 1) continue;
    const int64_t chunk = std::min(s.remaining(), opt_.prefill_chunk);
    if (budget_used > 0 && budget_used + chunk > opt_.prefill_budget) continue;
    if (!ensure_blocks(s, s.computed + chunk)) break;
    add_row(s, chunk);
    budget_used += chunk;
  }

  // 3. Admissions while rows, budget and blocks allow (not in a step that had to preempt).
  while (!preempted_now && !waiting_.empty() && static_cast<int64_t>(running_.size()) < opt_.max_rows) {
    Seq& s = *waiting_.front();
    admit_prefix(s);
    const int64_t chunk = std::min(s.remaining(), opt_.prefill_chunk);
    if (budget_used > 0 && budget_used + chunk > opt_.prefill_budget) { release(s); break; }
    if (!ensure_blocks(s, s.computed + chunk)) { release(s); break; }
    if (!s.admitted_once) {
      s.admitted_once = true;
      s.cached_tokens = s.computed;
      totals_.cached_tokens += s.computed;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    add_row(*running_.back(), chunk);
    budget_used += chunk;
  }
  for (const StepRow& r : plan.rows)
    if (!r.sample || r.count > 1) plan.prefill_tokens += r.count;
  return !plan.rows.empty() || running_.empty();
}

void Scheduler::complete(const StepPlan& plan, const StepOutput& out, std::vector<StepEvent>& events) {
  MLXB_CHECK(out.tokens.size() == plan.rows.size(), "runner output does not match the plan");
  totals_.prefill_tokens += plan.prefill_tokens;
  ++totals_.steps;
  if (!plan.rows.empty() && !plan.rows[0].tokens) ++totals_.steps_ahead;
  for (size_t k = 0; k < plan.rows.size(); ++k) {
    const StepRow& r = plan.rows[k];
    Seq* s = find_running(r.seq_id);
    if (!s && !r.tokens) continue;  // a fed row (plan_ahead) whose sequence ended the step before
    MLXB_CHECK(s != nullptr && s->computed == r.start, "plan row does not match a running sequence");
    s->computed += r.count;
    publish_full_blocks(*s);
    if (!r.sample) continue;
    const int32_t tok = out.tokens[k];
    s->tokens.push_back(tok);
    ++s->generated;
    ++totals_.generated_tokens;
    StepEvent e;
    e.seq_id = s->req.id;
    e.token = tok;
    e.generated = s->generated;
    if (k < out.samples.size()) e.sample = out.samples[k];
    const auto& stops = s->req.stop_tokens;
    FinishReason reason = FinishReason::kNone;
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) reason = FinishReason::kStop;
    else if (s->generated >= s->req.max_new_tokens) reason = FinishReason::kLength;
    else if (static_cast<int64_t>(s->tokens.size()) >= opt_.max_context) reason = FinishReason::kLength;
    if (reason == FinishReason::kNone) {
      events.push_back(std::move(e));
      continue;
    }
    std::vector<StepEvent> tmp;
    finish(*s, reason, tmp);
    e.finish = reason;
    e.prompt_tokens = tmp[0].prompt_tokens;
    e.cached_tokens = tmp[0].cached_tokens;
    events.push_back(std::move(e));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Seq>& s) { return s->done; }),
                 running_.end());
}

void Scheduler::fail_step(const StepPlan& plan, const std::string& message, std::vector<StepEvent>& events) {
  ++totals_.steps;
  for (const StepRow& r : plan.rows)
    if (Seq* s = find_running(r.seq_id); s && !s->done) finish(*s, FinishReason::kError, events, message);
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Seq>& s) { return s->done; }),
                 running_.end());
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = totals_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.blocks = blocks_.counts();
  return s;
}

}  // namespace mlxb
