// A loaded decoder: the contract between model graphs and everything that drives them (scoring,
// greedy decoding, the sampler loop, later the batching engine). A graph never knows who calls it;
// callers never know the family.
#pragma once
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/config.h"
#include "kv/cache.h"

namespace mlxb {

class PagedKVPool;
struct SampleArgs;  // ops/ops.h
struct SampleOut;

struct LoadOptions {
  Device device = Device::kCPU;
  // Weights and activations: F32 (upcast at load), BF16 / F16 (kept; CPU still computes in f32),
  // or "auto" = the checkpoint's dtype (auto_dtype = true).
  DType dtype = DType::F32;
  bool auto_dtype = true;
  // Progress while loading: fraction in [0, 1] and a short phase name. May be called from any thread.
  std::function<void(double, const char*)> progress;
};

// What a graph declares about itself (composition reads these, never the family name).
struct GraphCapabilities {
  bool sliding_window = false;   // some layers use a rotating cache
  bool logit_softcap = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual GraphCapabilities capabilities() const = 0;
  virtual Device device() const = 0;
  virtual int64_t weight_bytes() const = 0;

  // Fresh caches for one sequence of at most max_tokens tokens.
  virtual CacheSet make_caches(int64_t max_tokens) const = 0;

  // Runs `t` tokens (positions caches.length() ...) through the graph, appending to the caches.
  // Writes float32 logits to host memory `logits`: [t, vocab] when all_rows, else [1, vocab] for
  // the last token only.
  virtual void forward(const int32_t* ids, int64_t t, CacheSet& caches, float* logits, bool all_rows) = 0;

  // Final hidden states (after the final norm, before the LM head) of `t` tokens run as
  // forward() runs them: float32 [t, hidden] when all_rows, else [1, hidden] for the last token.
  // What pooled embeddings are made of. The default (a model without such an output) throws.
  virtual void forward_hidden(const int32_t* ids, int64_t t, CacheSet& caches, float* hidden, bool all_rows) {
    (void)ids;
    (void)t;
    (void)caches;
    (void)hidden;
    (void)all_rows;
    fail(ErrorCode::kUnsupported, "this model has no hidden-state output");
  }

  // Greedy step: as forward() with all_rows = false, but returns only the index of the first
  // maximum of the last row's logits (a device model computes it where the logits are and copies
  // one int32 back). The default runs forward() and scans the row on the host.
  virtual int32_t forward_argmax(const int32_t* ids, int64_t t, CacheSet& caches) {
    std::vector<float> row(static_cast<size_t>(config().vocab_size));
    forward(ids, t, caches, row.data(), false);
    int64_t best = 0;
    for (int64_t i = 1; i < static_cast<int64_t>(row.size()); ++i)
      if (row[static_cast<size_t>(i)] > row[static_cast<size_t>(best)]) best = i;
    return static_cast<int32_t>(best);
  }

  // n greedy steps after token `id` (already sampled, not yet in the caches): tokens[0] is the
  // argmax after `id`, tokens[i] the argmax after tokens[i - 1]. The default runs
  // forward_argmax per step; a device model may queue the next step before it reads a token.
  virtual void greedy_steps(int32_t id, int64_t n, CacheSet& caches, int32_t* tokens) {
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = forward_argmax(&id, 1, caches);
      id = tokens[i];
    }
  }

  // Sampling step: as forward() with all_rows = false, then ops::sample of the last row's logits
  // under `args` where the logits are (only `out` comes back). False: the family has no such path
  // and nothing was run (the caller uses forward() and samples on the host).
  virtual bool forward_sample(const int32_t* ids, int64_t t, CacheSet& caches, const SampleArgs& args, SampleOut& out) {
    (void)ids;
    (void)t;
    (void)caches;
    (void)args;
    (void)out;
    return false;
  }

  // --- batched execution (the engine's runner). Additive; the defaults keep every family working.
  struct Row {
    const int32_t* ids = nullptr;  // t tokens at positions caches.length() ...
    int64_t t = 0;
    CacheSet* caches = nullptr;    // any LayerCache (the engine passes paged caches)
    float* logits = nullptr;       // as forward(): [t, vocab] when all_rows, else [1, vocab]
    bool all_rows = false;
  };
  // Runs independent sequences in one call. The default runs them one by one through forward();
  // a family that fuses rows must give every row the logits it would get alone (batch invariance).
  virtual void forward_rows(const std::vector<Row>& rows) {
    for (const Row& r : rows) forward(r.ids, r.t, *r.caches, r.logits, r.all_rows);
  }
  // One sequence's chunk for forward_paged: `t` tokens at positions [start, start + t) whose KV
  // blocks (covering [0, start + t)) are `blocks` in the engine's pool.
  struct PagedRow {
    const int32_t* ids = nullptr;
    int64_t t = 0;
    int64_t start = 0;
    const std::vector<int32_t>* blocks = nullptr;
    float* logits = nullptr;    // non-null: f32 [1, vocab] logits of the last token are written here
    int32_t* argmax = nullptr;  // non-null: the argmax of those logits (ops::argmax: first maximum),
                                // computed where the logits are (no logits copy needed)
    const SampleArgs* sample = nullptr;  // non-null (with sampled): ops::sample of those logits under
    SampleOut* sampled = nullptr;        // these args (args.row is set by the model), result here
  };
  // Runs independent sequences over a paged KV pool in one pass: every linear runs once over all
  // rows' tokens. Rows with neither logits nor argmax only write their KV. Returns false when
  // the family has no such path (the caller then uses forward_rows with paged caches).
  // Batch invariance: on the CPU each row gets bit for bit what it gets alone; on CUDA when
  // `batch_invariant` is set (slower: M-independent kernels only).
  virtual bool forward_paged(PagedKVPool& pool, const std::vector<PagedRow>& rows, bool batch_invariant) {
    (void)pool;
    (void)rows;
    (void)batch_invariant;
    return false;
  }
  // Engine pipelining: queues one forward_paged step whose every row decodes one token and asks
  // only for its argmax, and returns without waiting for it. `fed`: row i's id is the argmax of
  // row i of the step queued just before (the rows' `ids` are not read; same rows, same order).
  // Returns a ticket for forward_paged_collect, or -1 when this step cannot be queued so (no such
  // path on this device, or its recorded step is not ready): the caller then runs forward_paged
  // once the steps queued before have been collected.
  virtual int64_t forward_paged_queue(PagedKVPool& pool, const std::vector<PagedRow>& rows, bool batch_invariant, bool fed) {
    (void)pool;
    (void)rows;
    (void)batch_invariant;
    (void)fed;
    return -1;
  }
  // Waits for a queued step and writes its `n` argmax ids (rows in plan order) to `argmax`.
  virtual void forward_paged_collect(int64_t ticket, int32_t* argmax, int64_t n) {
    (void)ticket;
    (void)argmax;
    (void)n;
  }
  // Element type the KV cache should store for this model (the paged pool allocates it).
  virtual DType kv_dtype() const { return DType::F32; }
};

// Reads config.json, picks the family by model_type (models/registry), loads and checks weights.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);

}  // namespace mlxb
