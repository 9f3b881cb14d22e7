// Batch invariance of the batched decoder forward on the CPU (models/decoder_rows.cc):
//  1. matmul: every row of an M-row product is bit for bit the row computed alone (M = 1), for
//     f32/bf16/f16 weights and K not a multiple of the SIMD width.
//  2. Model::forward_paged (the engine's path) and Model::forward_rows: several sequences of
//     different lengths advanced together under a schedule that mixes prefill chunks of various
//     sizes with decode rows give, at every sampled position, exactly (memcmp) the logits that
//     forward() gives each sequence alone (whole prompt at once, then one token per call) over
//     paged caches, and over contiguous caches for families without sliding layers. The device
//     argmax of the paged path equals the argmax of those logits. Dense fixtures in f32 and bf16,
//     and the MLX-quantized fixtures (../quant).
// Usage: batched_forward_test FIXTURE_ROOT [family...]. Prints "all batched forward checks
// passed" on success. Run by test/engine-batched.test.ts under each CPU kernel family.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "engine/model_runner.h"
#include "kv/paged.h"
#include "models/model.h"
#include "ops/ops.h"

#include "check.h"

using namespace mlxb;

static int failures = 0;

static void check_matmul_invariance() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType wt : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t k : {int64_t{67}, int64_t{256}, int64_t{1000}}) {
      const int64_t n = 37, m = 23;
      Tensor x = Tensor::empty({m, k}, DType::F32);
      Tensor wf = Tensor::empty({n, k}, DType::F32);
      for (int64_t i = 0; i < m * k; ++i) x.ptr<float>()[i] = u(rng);
      for (int64_t i = 0; i < n * k; ++i) wf.ptr<float>()[i] = u(rng);
      Tensor w = wf.astype(wt);
      Tensor bias = Tensor::empty({n}, DType::F32);
      for (int64_t i = 0; i < n; ++i) bias.ptr<float>()[i] = u(rng);
      Tensor all = Tensor::empty({m, n}, DType::F32);
      ops::matmul(x, w, &bias, all);
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{9}}) {
        for (int64_t r0 = 0; r0 + rows <= m; r0 += rows) {
          Tensor part = Tensor::empty({rows, n}, DType::F32);
          ops::matmul(x.slice_rows(r0, r0 + rows), w, &bias, part);
          CHECK(std::memcmp(part.data(), all.ptr<float>() + r0 * n, static_cast<size_t>(rows * n) * 4) == 0,
                "matmul %s K=%lld: rows [%lld, %lld) computed %lld at a time differ from M=%lld", dtype_name(wt),
                static_cast<long long>(k), static_cast<long long>(r0), static_cast<long long>(r0 + rows),
                static_cast<long long>(rows), static_cast<long long>(m));
        }
      }
    }
  }
}

static void expect_invalid(const std::function<void()>& fn, const char* what) {
  try {
    fn();
    CHECK(false, "%s: no error", what);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument, "%s: code %s (%s)", what, error_code_name(e.code()), e.what());
  }
}

// Bad inputs of the paged ops are typed errors, raised before anything is read or written.
static void check_paged_op_errors() {
  Tensor pool = Tensor::zeros({2, 8, 4}, DType::F32);  // 2 heads, 8 slots (2 blocks of 4), d 4
  Tensor out = Tensor::empty({2, 3, 4}, DType::F32);
  int32_t bad_slots[3] = {0, 8, 1};
  expect_invalid([&] { ops::kv_gather(pool, Tensor::wrap(bad_slots, {3}, DType::I32), out); }, "kv_gather slot past the cache");
  Tensor q = Tensor::zeros({2, 2, 4}, DType::F32), o = Tensor::empty({2, 2, 4}, DType::F32);
  int32_t off[1] = {0}, cnt[1] = {2}, len[1] = {6}, table[2] = {0, 2};
  PagedAttentionRows rows;
  rows.q_offset = Tensor::wrap(off, {1}, DType::I32);
  rows.q_count = Tensor::wrap(cnt, {1}, DType::I32);
  rows.kv_len = Tensor::wrap(len, {1}, DType::I32);
  rows.block_table = Tensor::wrap(table, {1, 2}, DType::I32);
  rows.block_size = 4;
  rows.max_q_count = 2;
  expect_invalid([&] { ops::paged_attention(q, pool, pool, rows, AttentionArgs{}, o); }, "paged_attention block outside the pool");
  table[1] = 1;
  len[0] = 9;
  expect_invalid([&] { ops::paged_attention(q, pool, pool, rows, AttentionArgs{}, o); }, "paged_attention kv_len past the table");
  len[0] = 1;
  expect_invalid([&] { ops::paged_attention(q, pool, pool, rows, AttentionArgs{}, o); }, "paged_attention fewer keys than queries");
  len[0] = 6;
  cnt[0] = 3;
  expect_invalid([&] { ops::paged_attention(q, pool, pool, rows, AttentionArgs{}, o); }, "paged_attention queries past q");
  cnt[0] = 2;
  ops::paged_attention(q, pool, pool, rows, AttentionArgs{}, o);  // the repaired call runs
}

struct Seq {
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt = 0;
  int64_t gen = 0;
  std::vector<std::vector<float>> logits;  // at every sampled point, alone
};

static int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// forward() alone: the prompt at once, then one token per call; fills tokens and logits.
static void run_alone(Model& model, Seq& s, bool paged) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t total = s.prompt + s.gen;
  const int64_t nb = (total + 3) / 4;
  PagedKVPool pool(ModelRunner::spec_for(model, 4, nb + 1));
  std::vector<int32_t> table;  // blocks in reverse order, block 0 unused
  for (int64_t b = 0; b < nb; ++b) table.push_back(static_cast<int32_t>(nb - b));
  CacheSet caches = paged ? make_paged_caches(pool, table, 0) : model.make_caches(total);
  s.tokens.resize(static_cast<size_t>(s.prompt));
  s.logits.clear();
  std::vector<float> out(static_cast<size_t>(vocab));
  model.forward(s.tokens.data(), s.prompt, caches, out.data(), false);
  for (int64_t g = 0; g < s.gen; ++g) {
    s.logits.push_back(out);
    s.tokens.push_back(argmax(out));
    if (g + 1 < s.gen) model.forward(&s.tokens.back(), 1, caches, out.data(), false);
  }
}

// The rows advanced together: row i starts at step start_step[i]; its prompt goes in chunks of
// chunk[i] tokens; then one token per step.
static void run_batched(Model& model, std::vector<Seq>& seqs, bool paged_api, const std::vector<int64_t>& chunk,
                        const std::vector<int64_t>& start_step, const char* name) {
  const int64_t vocab = model.config().vocab_size;
  const size_t n = seqs.size();
  int64_t blocks = 0;
  for (const Seq& s : seqs) blocks += (s.prompt + s.gen + 3) / 4;
  PagedKVPool pool(ModelRunner::spec_for(model, 4, blocks + 2));
  std::vector<std::vector<int32_t>> tables(n);
  int64_t next = blocks + 1;  // hand out blocks from the top down, interleaved across rows
  for (int64_t b = 0; next > 1; ++b)
    for (size_t i = 0; i < n; ++i)
      if (b < (seqs[i].prompt + seqs[i].gen + 3) / 4) tables[i].push_back(static_cast<int32_t>(next--));
  std::vector<int64_t> done(n, 0), sampled(n, 0);
  std::vector<CacheSet> caches(n);
  for (size_t i = 0; i < n; ++i) caches[i] = make_paged_caches(pool, tables[i], 0);
  std::vector<std::vector<float>> out(n, std::vector<float>(static_cast<size_t>(vocab)));
  std::vector<int32_t> am(n, -1);
  for (int64_t step = 0;; ++step) {
    std::vector<size_t> who;
    std::vector<Model::PagedRow> prow;
    std::vector<Model::Row> rrow;
    for (size_t i = 0; i < n; ++i) {
      Seq& s = seqs[i];
      if (step < start_step[i] || sampled[i] == s.gen) continue;
      const int64_t have = s.prompt + sampled[i];  // known tokens
      const int64_t t = done[i] < s.prompt ? std::min(chunk[i], s.prompt - done[i]) : 1;
      const bool sample = done[i] + t == have;
      who.push_back(i);
      Model::PagedRow p;
      p.ids = s.tokens.data() + done[i];
      p.t = t;
      p.start = done[i];
      p.blocks = &tables[i];
      if (sample) {
        p.logits = out[i].data();
        p.argmax = &am[i];
      }
      prow.push_back(p);
      Model::Row r;
      r.ids = p.ids;
      r.t = t;
      r.caches = &caches[i];
      r.logits = out[i].data();
      rrow.push_back(r);
    }
    if (who.empty()) break;
    if (paged_api) {
      CHECK(model.forward_paged(pool, prow, false), "%s: the decoder has a paged path", name);
    } else {
      model.forward_rows(rrow);
    }
    for (size_t k = 0; k < who.size(); ++k) {
      const size_t i = who[k];
      Seq& s = seqs[i];
      done[i] += prow[k].t;
      if (done[i] < s.prompt + sampled[i]) continue;
      const std::vector<float>& want = s.logits[static_cast<size_t>(sampled[i])];
      CHECK(std::memcmp(out[i].data(), want.data(), want.size() * 4) == 0, "%s (%s): row %zu, token %lld: logits differ",
            name, paged_api ? "forward_paged" : "forward_rows", i, static_cast<long long>(sampled[i]));
      if (paged_api) CHECK(am[i] == argmax(want), "%s: row %zu device argmax %d vs %d", name, i, am[i], argmax(want));
      ++sampled[i];
      if (sampled[i] < s.gen) CHECK(s.tokens[static_cast<size_t>(s.prompt + sampled[i] - 1)] == argmax(want), "%s: token", name);
    }
  }
  for (size_t i = 0; i < n; ++i) CHECK(sampled[i] == seqs[i].gen, "%s: row %zu finished", name, i);
}

static void check_family(const std::string& root, const std::string& name, DType dtype) {
  LoadOptions lo;
  lo.device = Device::kCPU;
  lo.dtype = dtype;
  lo.auto_dtype = false;
  std::unique_ptr<Model> model = load_model(root + "/" + name, lo);
  const int64_t vocab = model->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(name.size() * 31 + static_cast<int>(dtype)));
  const std::vector<int64_t> prompts = {3, 17, 9, 26, 1, 12};
  std::vector<Seq> seqs;
  for (int64_t p : prompts) {
    Seq s;
    s.prompt = p;
    s.gen = 6;
    for (int64_t i = 0; i < p; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    seqs.push_back(s);
  }
  const bool sliding = model->capabilities().sliding_window;
  const std::string label = name + (dtype == DType::BF16 ? " bf16" : "");
  for (Seq& s : seqs) run_alone(*model, s, true);
  if (!sliding) {
    // Contiguous caches give the same bits as paged ones (the keys are read in the same order).
    for (Seq s : seqs) {
      std::vector<std::vector<float>> paged = s.logits;
      run_alone(*model, s, false);
      for (size_t g = 0; g < paged.size(); ++g)
        CHECK(std::memcmp(paged[g].data(), s.logits[g].data(), paged[g].size() * 4) == 0, "%s: contiguous vs paged alone",
              label.c_str());
    }
  }
  // Dynamic NTK rope frequencies depend on the length reached by each forward call, so a prompt
  // prefilled in other chunks than alone legitimately differs past max_position_embeddings: that
  // family keeps the alone chunking (whole prompts) and is batched with the other rows only.
  const bool dynamic = model->config().rope.type == RopeType::kDynamic;
  run_batched(*model, seqs, true, {3, 17, 9, 26, 1, 12}, {0, 0, 0, 0, 0, 0}, label.c_str());
  run_batched(*model, seqs, true, {3, 17, 9, 26, 1, 12}, {0, 2, 1, 3, 0, 5}, label.c_str());
  if (!dynamic) {
    run_batched(*model, seqs, true, {2, 5, 9, 4, 1, 26}, {0, 0, 1, 2, 3, 3}, label.c_str());
    run_batched(*model, seqs, false, {1, 4, 3, 7, 1, 5}, {2, 0, 1, 0, 4, 1}, label.c_str());
  } else {
    run_batched(*model, seqs, false, {3, 17, 9, 26, 1, 12}, {2, 0, 1, 0, 4, 1}, label.c_str());
  }
  std::printf("ok %s\n", label.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: batched_forward_test FIXTURE_ROOT [family...]\n");
    return 2;
  }
  try {
    check_matmul_invariance();
    std::printf("ok matmul invariance\n");
    check_paged_op_errors();
    std::printf("ok paged op errors\n");
    std::vector<std::string> fams;
    for (int i = 2; i < argc; ++i) fams.push_back(argv[i]);
    if (fams.empty()) fams = {"llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3_text", "llama_dynamic"};
    for (const std::string& f : fams) check_family(argv[1], f, DType::F32);
    if (argc == 2) {
      check_family(argv[1], "llama", DType::BF16);
      // MLX-quantized checkpoints (qmatmul / qembedding paths), next to the dense fixtures.
      const std::string quant = std::string(argv[1]) + "/../quant";
      for (const char* f : {"llama_q4", "llama_q8", "llama_q4_mixed", "qwen3_q4", "gemma3_text_q8"}) check_family(quant, f, DType::F32);
    }
  } catch (const Error& e) {
    std::printf("FAIL: error %s: %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
  if (failures) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  std::printf("all batched forward checks passed\n");
  return 0;
}
