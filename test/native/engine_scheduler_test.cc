// Native tests of the engine's model-free parts: SHA-256 vectors, the prefix cache, the block
// manager and the scheduler driven by a fake runner that stores token ids in its "KV" blocks and
// derives each sampled token from every id it reads back through the block table. Any wrong
// block table, a prefix hit on the wrong tokens, or a bad recompute after preemption changes the
// tokens, so outputs are compared with a direct computation. Prints "ok <name>" per test; exits
// non-zero on the first failure.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/sha256.h"
#include "kv/paged.h"

using namespace mlxb;

#define EXPECT(c)                                                                  \
  do {                                                                             \
    if (!(c)) {                                                                    \
      std::fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #c);          \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

static const int32_t kVocab = 97;

// The "model": next token from every token so far (order-sensitive).
static int32_t next_token(const std::vector<int32_t>& toks) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : toks) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % kVocab);
}

static std::vector<int32_t> reference(std::vector<int32_t> toks, int64_t n, const std::vector<int32_t>& stops) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = next_token(toks);
    out.push_back(t);
    toks.push_back(t);
    for (int32_t s : stops) if (s == t) return out;
  }
  return out;
}

class FakeRunner : public StepRunner {
 public:
  FakeRunner(int64_t blocks, int64_t bs) : bs_(bs), slots_(static_cast<size_t>(blocks * bs), -1) {}
  void run(const StepPlan& plan, StepOutput& out) override {
    out.tokens.assign(plan.rows.size(), -1);
    ++steps;
    for (size_t i = 0; i < plan.rows.size(); ++i) {
      const StepRow& r = plan.rows[i];
      EXPECT(static_cast<int64_t>(r.blocks->size()) * bs_ >= r.start + r.count);
      for (int64_t j = 0; j < r.count; ++j) {
        const int64_t p = r.start + j;
        slots_[static_cast<size_t>((*r.blocks)[p / bs_] * bs_ + p % bs_)] = r.tokens[j];
      }
      if (r.count > 1) max_chunk = std::max(max_chunk, r.count);
      rows_per_seq[r.seq_id] += 1;
      if (!r.sample) continue;
      std::vector<int32_t> ctx;
      for (int64_t p = 0; p < r.start + r.count; ++p) ctx.push_back(slots_[static_cast<size_t>((*r.blocks)[p / bs_] * bs_ + p % bs_)]);
      out.tokens[i] = next_token(ctx);
    }
  }
  void forget(int64_t id) override { forgotten.push_back(id); }
  int64_t bs_;
  std::vector<int32_t> slots_;
  int64_t steps = 0, max_chunk = 0;
  std::map<int64_t, int64_t> rows_per_seq;
  std::vector<int64_t> forgotten;
};

struct Collected {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, FinishReason> finish;
  std::map<int64_t, int64_t> cached;
  void take(const std::vector<StepEvent>& ev) {
    for (const StepEvent& e : ev) {
      if (e.token >= 0) tokens[e.seq_id].push_back(e.token);
      if (e.finish != FinishReason::kNone) { finish[e.seq_id] = e.finish; cached[e.seq_id] = e.cached_tokens; }
    }
  }
};

static void drive(Scheduler& s, FakeRunner& r, Collected& c, int64_t max_steps = 100000) {
  StepPlan plan;
  StepOutput out;
  for (int64_t i = 0; i < max_steps; ++i) {
    std::vector<StepEvent> ev;
    bool have = s.plan(plan, ev);
    c.take(ev);
    if (!have) { if (s.idle()) return; continue; }
    r.run(plan, out);
    ev.clear();
    s.complete(plan, out, ev);
    c.take(ev);
  }
  EXPECT(false && "scheduler did not finish");
}

static std::vector<int32_t> prompt(int seed, int n, const std::vector<int32_t>& prefix = {}) {
  std::vector<int32_t> p = prefix;
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) { x = x * 1664525u + 1013904223u; p.push_back(static_cast<int32_t>((x >> 8) % kVocab)); }
  return p;
}

static void test_sha256() {
  EXPECT(to_hex(sha256("abc", 3)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT(to_hex(sha256("", 0)) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char* m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT(to_hex(sha256(m, static_cast<int64_t>(std::strlen(m)))) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  Sha256 h;  // fed in uneven pieces
  for (size_t i = 0; i < million.size(); i += 777) h.update(million.data() + i, static_cast<int64_t>(std::min<size_t>(777, million.size() - i)));
  EXPECT(to_hex(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::puts("ok sha256");
}

static void test_prefix_keys_and_lru() {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  Digest z{};
  EXPECT(block_key("m", "", z, a.data(), 4) != block_key("m", "", z, b.data(), 4));
  EXPECT(block_key("m", "", z, a.data(), 4) != block_key("m2", "", z, a.data(), 4));
  EXPECT(block_key("m", "", z, a.data(), 4) != block_key("m", "lora", z, a.data(), 4));
  Digest k1 = block_key("m", "", z, a.data(), 4);
  EXPECT(block_key("m", "", k1, a.data(), 4) != k1);
  // Field boundaries are length-prefixed: ("ab", "c") and ("a", "bc") differ.
  EXPECT(block_key("ab", "c", z, a.data(), 4) != block_key("a", "bc", z, a.data(), 4));

  BlockManager bm(4, 4, 2);
  int32_t x = bm.allocate(), y = bm.allocate(), w = bm.allocate();
  EXPECT(x >= 0 && y >= 0 && w >= 0);
  Digest kx = block_key("m", "", z, a.data(), 4), ky = block_key("m", "", kx, a.data(), 4), kw = block_key("m", "", ky, a.data(), 4);
  bm.publish(x, kx, z, a.data());
  bm.publish(y, ky, kx, a.data());
  bm.publish(w, kw, ky, a.data());
  // A lookup re-checks tokens and parent, not only the key.
  EXPECT(bm.lookup(kx, z, b.data()) == -1);
  EXPECT(bm.lookup(kx, ky, a.data()) == -1);
  bm.release(x); bm.release(y); bm.release(w);  // capacity 2: the oldest (x) is evicted to free
  BlockCounts c = bm.counts();
  EXPECT(c.used == 0 && c.cached == 2 && c.free == 2 && c.total == 4);
  EXPECT(bm.lookup(kx, z, a.data()) == -1);
  int32_t hit = bm.lookup(ky, kx, a.data());
  EXPECT(hit == y && bm.ref_count(y) == 1);
  bm.release(y);
  // Allocation prefers free blocks, then evicts the least recently used cached one (w, not y).
  EXPECT(bm.allocate() >= 0 && bm.allocate() >= 0);
  int32_t ev = bm.allocate();
  EXPECT(ev == w);
  EXPECT(bm.lookup(ky, kx, a.data()) == y);
  EXPECT(bm.allocate() == -1);
  std::puts("ok prefix keys, re-check and LRU");
}

static SchedulerOptions opts(int64_t blocks, int64_t bs, int64_t rows, int64_t chunk, int64_t cache) {
  SchedulerOptions o;
  o.num_blocks = blocks; o.block_size = bs; o.max_rows = rows; o.prefill_chunk = chunk; o.prefill_budget = chunk;
  o.prefix_cache_blocks = cache; o.max_context = 4096; o.max_queue = 1000; o.fingerprint = "fake";
  return o;
}

static void test_concurrent_equals_reference_under_pressure() {
  // 24 requests, shared prefixes, a pool far smaller than their total need: preemption and
  // prefix reuse both happen, and every output must equal the direct computation.
  const int64_t bs = 4, blocks = 40;
  Scheduler s(opts(blocks, bs, 8, 8, blocks));
  FakeRunner r(blocks, bs);
  std::vector<int32_t> shared = prompt(999, 13);
  std::map<int64_t, std::vector<int32_t>> want;
  for (int i = 0; i < 24; ++i) {
    SeqRequest q;
    q.id = 100 + i;
    q.prompt = i % 2 ? prompt(i, 5 + i % 7, shared) : prompt(i, 3 + i);
    q.max_new_tokens = 20 + (i * 7) % 30;
    q.stop_tokens = {96};
    want[q.id] = reference(q.prompt, q.max_new_tokens, q.stop_tokens);
    s.add(q);
  }
  Collected c;
  drive(s, r, c);
  for (auto& [id, w] : want) {
    EXPECT(c.tokens[id] == w);
    EXPECT(c.finish[id] == (w.back() == 96 ? FinishReason::kStop : FinishReason::kLength));
  }
  SchedulerStats st = s.stats();
  EXPECT(st.preemptions > 0);
  EXPECT(st.cached_tokens > 0);
  EXPECT(st.blocks.used == 0 && st.blocks.free + st.blocks.cached == st.blocks.total);
  std::printf("ok concurrent == reference (preemptions %lld, cached prompt tokens %lld, steps %lld)\n",
              (long long)st.preemptions, (long long)st.cached_tokens, (long long)st.steps);
}

static void test_prefix_hit_output_equals_miss() {
  const int64_t bs = 4, blocks = 64;
  for (bool cache : {false, true}) {
    Scheduler s(opts(blocks, bs, 4, 16, cache ? blocks : 0));
    FakeRunner r(blocks, bs);
    std::vector<int32_t> p = prompt(7, 30);
    Collected c;
    for (int i = 0; i < 3; ++i) {
      SeqRequest q; q.id = i; q.prompt = p; q.max_new_tokens = 12;
      s.add(q);
      drive(s, r, c);
    }
    EXPECT(c.tokens[0] == reference(p, 12, {}) && c.tokens[1] == c.tokens[0] && c.tokens[2] == c.tokens[0]);
    EXPECT(c.cached[0] == 0);
    EXPECT(c.cached[1] == (cache ? 28 : 0));  // 7 full blocks of the 30-token prompt
    // The whole prompt is cached after the first run, but one token is always recomputed.
    EXPECT(c.cached[2] == (cache ? 28 : 0));
    BlockCounts b = s.blocks().counts();
    EXPECT(b.used == 0 && b.free + b.cached == b.total);
  }
  std::puts("ok prefix-cache hit == miss");
}

static void test_cancel_frees_and_keeps_others() {
  const int64_t bs = 4, blocks = 64;
  Scheduler s(opts(blocks, bs, 4, 8, blocks));
  FakeRunner r(blocks, bs);
  std::map<int64_t, std::vector<int32_t>> want;
  for (int i = 0; i < 3; ++i) {
    SeqRequest q; q.id = i; q.prompt = prompt(50 + i, 10); q.max_new_tokens = 40;
    want[i] = reference(q.prompt, 40, {});
    s.add(q);
  }
  StepPlan plan; StepOutput out; Collected c;
  for (int step = 0; step < 8; ++step) {
    std::vector<StepEvent> ev;
    EXPECT(s.plan(plan, ev));
    r.run(plan, out);
    s.complete(plan, out, ev);
    c.take(ev);
  }
  const int64_t used_before = s.blocks().counts().used;
  s.cancel(1);
  std::vector<StepEvent> ev;
  EXPECT(s.plan(plan, ev));  // the cancellation takes effect in this plan, before any compute
  c.take(ev);
  EXPECT(c.finish[1] == FinishReason::kAbort);
  for (const StepRow& row : plan.rows) EXPECT(row.seq_id != 1);
  EXPECT(s.blocks().counts().used < used_before);
  r.run(plan, out);
  ev.clear();
  s.complete(plan, out, ev);
  c.take(ev);
  drive(s, r, c);
  EXPECT(c.tokens[0] == want[0] && c.tokens[2] == want[2]);
  EXPECT(c.tokens[1].size() < want[1].size());
  EXPECT(std::equal(c.tokens[1].begin(), c.tokens[1].end(), want[1].begin()));
  BlockCounts b = s.blocks().counts();
  EXPECT(b.used == 0 && b.free + b.cached == b.total);
  std::puts("ok cancel frees blocks, others unchanged");
}

static void test_chunked_prefill_never_stalls_decode() {
  const int64_t bs = 4, blocks = 256;
  Scheduler s(opts(blocks, bs, 4, 8, 0));
  FakeRunner r(blocks, bs);
  SeqRequest a; a.id = 1; a.prompt = prompt(1, 5); a.max_new_tokens = 60;
  s.add(a);
  StepPlan plan; StepOutput out; Collected c;
  for (int i = 0; i < 3; ++i) {
    std::vector<StepEvent> ev;
    EXPECT(s.plan(plan, ev)); r.run(plan, out); s.complete(plan, out, ev); c.take(ev);
  }
  SeqRequest b; b.id = 2; b.prompt = prompt(2, 200); b.max_new_tokens = 5;
  s.add(b);
  // While the 200-token prompt is prefilled in chunks of 8, row 1 gets a token every step.
  int64_t prefill_steps = 0;
  while (c.tokens[2].empty()) {
    const size_t before = c.tokens[1].size();
    std::vector<StepEvent> ev;
    EXPECT(s.plan(plan, ev));
    for (const StepRow& row : plan.rows) EXPECT(row.count <= 8);
    r.run(plan, out); s.complete(plan, out, ev); c.take(ev);
    EXPECT(c.tokens[1].size() == before + 1);
    ++prefill_steps;
  }
  EXPECT(prefill_steps == 25);
  drive(s, r, c);
  EXPECT(c.tokens[1] == reference(a.prompt, 60, {}) && c.tokens[2] == reference(b.prompt, 5, {}));
  std::puts("ok chunked prefill interleaves with decode");
}

static void test_limits() {
  SchedulerOptions o = opts(8, 4, 2, 8, 0);
  o.max_queue = 2; o.max_context = 20;
  Scheduler s(o);
  auto code_of = [&](SeqRequest q) -> std::string {
    try { s.add(std::move(q)); } catch (const Error& e) { return error_code_name(e.code()) + std::string(":") + e.field(); }
    return "";
  };
  SeqRequest q; q.prompt = prompt(1, 4); q.max_new_tokens = 4;
  q.id = 1; EXPECT(code_of(q).empty());
  q.id = 2; EXPECT(code_of(q).empty());
  q.id = 3; EXPECT(code_of(q) == "BUSY:maxQueue");
  SeqRequest big; big.id = 4; big.prompt = prompt(1, 20); big.max_new_tokens = 1;
  EXPECT(code_of(big) == "INVALID_ARGUMENT:prompt");  // context
  SeqRequest empty; empty.id = 5; empty.max_new_tokens = 1;
  EXPECT(code_of(empty) == "INVALID_ARGUMENT:prompt");
  SchedulerOptions o2 = opts(3, 4, 2, 8, 0);
  Scheduler s2(o2);
  SeqRequest pool; pool.id = 6; pool.prompt = prompt(1, 12); pool.max_new_tokens = 1;
  bool threw = false;
  try { s2.add(pool); } catch (const Error& e) { threw = e.code() == ErrorCode::kInvalidArgument; }
  EXPECT(threw);  // 13 positions need 4 blocks of 4; the pool has 3
  // A sequence that outgrows the whole pool alone ends with "length", not a hang.
  SeqRequest grow; grow.id = 7; grow.prompt = prompt(1, 6); grow.max_new_tokens = 100;
  s2.add(grow);
  FakeRunner r(3, 4);
  Collected c;
  drive(s2, r, c);
  EXPECT(c.finish[7] == FinishReason::kLength && c.tokens[7].size() == 7);  // positions 0..11 fill 3 blocks
  std::puts("ok limits: busy, context, pool");
}

static void test_engine_thread() {
  const int64_t bs = 4, blocks = 64;
  std::mutex mu;
  std::condition_variable cv;
  Collected c;
  bool last = false;
  auto runner = std::make_unique<FakeRunner>(blocks, bs);
  Engine e(opts(blocks, bs, 4, 8, blocks), std::move(runner), [&](std::vector<StepEvent>&& ev, bool is_last) {
    std::lock_guard<std::mutex> lock(mu);
    c.take(ev);
    last = last || is_last;
    cv.notify_all();
  });
  std::map<int64_t, std::vector<int32_t>> want;
  for (int i = 0; i < 6; ++i) {
    SeqRequest q; q.id = i; q.prompt = prompt(300 + i, 9); q.max_new_tokens = 30;
    want[i] = reference(q.prompt, 30, {});
    e.submit(q);
  }
  e.close(false);  // drain
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return last; });
  }
  e.join();
  for (auto& [id, w] : want) EXPECT(c.tokens[id] == w && c.finish[id] == FinishReason::kLength);
  EngineStats st = e.stats();
  EXPECT(st.closed && st.sched.running == 0 && st.sched.blocks.used == 0);
  bool threw = false;
  try { SeqRequest q; q.id = 99; q.prompt = {1}; q.max_new_tokens = 1; e.submit(q); } catch (const Error& err) { threw = err.code() == ErrorCode::kAborted; }
  EXPECT(threw);
  std::puts("ok engine thread drains on close");
}

// Paged KV: tokens written in uneven chunks through block tables whose blocks are scattered
// over the pool read back, in order, exactly as written; two sequences sharing a pool never see
// each other's rows; f32 and bf16 pools.
static void test_paged_cache() {
  for (DType dt : {DType::F32, DType::BF16}) {
    PagedSpec spec;
    spec.dtype = dt; spec.layers = 2; spec.kv_heads = 3; spec.head_dim = 5; spec.block_size = 4; spec.num_blocks = 12;
    PagedKVPool pool(spec);
    EXPECT(pool.bytes() == PagedKVPool::bytes_per_block(spec) * 12);
    EXPECT(PagedKVPool::bytes_per_block(spec) == 2 * 2 * 3 * 5 * 4 * dtype_size(dt));
    std::vector<int32_t> ta = {7, 2, 11, 0}, tb = {5, 9, 1};
    const int64_t H = 3, D = 5;
    auto value = [&](int seq, int64_t pos, int64_t h, int64_t d, int kv) {
      // bf16-exact values (small integers over 8)
      return static_cast<float>(((seq * 31 + pos * 7 + h * 3 + d + kv * 11) % 41) - 20) / 8.0f;
    };
    int64_t len_a = 0, len_b = 0;
    for (int64_t chunk : {3, 1, 5, 2, 4}) {
      for (int seq = 0; seq < 2; ++seq) {
        std::vector<int32_t>& table = seq == 0 ? ta : tb;
        int64_t& len = seq == 0 ? len_a : len_b;
        if (len + chunk > static_cast<int64_t>(table.size()) * 4) continue;
        CacheSet set = make_paged_caches(pool, table, len);
        for (int64_t l = 0; l < 2; ++l) {
          Tensor k = Tensor::empty({chunk, H, D}, DType::F32), v = Tensor::empty({chunk, H, D}, DType::F32);
          std::vector<int32_t> pos;
          for (int64_t i = 0; i < chunk; ++i) {
            pos.push_back(static_cast<int32_t>(len + i));
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                k.ptr<float>()[(i * H + h) * D + d] = value(seq, len + i, h, d, 0) + l;
                v.ptr<float>()[(i * H + h) * D + d] = value(seq, len + i, h, d, 1) - l;
              }
          }
          KVView view = set[static_cast<size_t>(l)]->update(k, v, pos.data(), chunk);
          const int64_t n = len + chunk;
          EXPECT(view.k.dim(0) == H && view.k.dim(1) == n && view.k.dim(2) == D && view.pos.numel() == n);
          Tensor kf = view.k.astype(DType::F32), vf = view.v.astype(DType::F32);
          for (int64_t p = 0; p < n; ++p) {
            EXPECT(view.pos.ptr<int32_t>()[p] == p);
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                EXPECT(kf.ptr<float>()[(h * n + p) * D + d] == value(seq, p, h, d, 0) + l);
                EXPECT(vf.ptr<float>()[(h * n + p) * D + d] == value(seq, p, h, d, 1) - l);
              }
          }
        }
        EXPECT(set[0]->length() == len + chunk);
        len += chunk;
      }
    }
    EXPECT(len_a == 15 && len_b == 11);
    // A position the table does not cover is an error, not a write elsewhere.
    std::vector<int32_t> short_table = {3};
    CacheSet set = make_paged_caches(pool, short_table, 4);
    Tensor k = Tensor::zeros({1, H, D}, DType::F32);
    int32_t p4 = 4;
    bool threw = false;
    try { set[0]->update(k, k, &p4, 1); } catch (const Error&) { threw = true; }
    EXPECT(threw);
  }
  std::puts("ok paged KV cache (scattered blocks, f32 and bf16)");
}

int main() {
  test_paged_cache();
  test_sha256();
  test_prefix_keys_and_lru();
  test_concurrent_equals_reference_under_pressure();
  test_prefix_hit_output_equals_miss();
  test_cancel_frees_and_keeps_others();
  test_chunked_prefill_never_stalls_decode();
  test_limits();
  test_engine_thread();
  std::puts("all engine native tests passed");
  return 0;
}
