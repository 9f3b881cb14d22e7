// The shared decoder graph (see decoder.h): loading with config <-> tensor cross-checks, caches,
// and the forward pass.
#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

#include "models/decode_fused.h"
#include "models/decode_graph.h"
#include "models/rows_graph.h"
#include "models/decoder_rows.h"
#include "models/fold_norms.h"
#include "quant/affine.h"

namespace mlxb {

namespace {
bool defined(const Tensor& t) { return t.defined(); }
bool defined(const QuantWeight& q) { return q.packed.defined(); }
}  // namespace

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

void load_llama_layer(WeightLoader& wl, const DecoderSpec& spec, int64_t i, LayerWeights& w) {
  const ModelConfig& c = wl.config();
  const std::string p = layer_prefix(i);
  const int64_t h = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  w.input_norm = wl.tensor(p + "input_layernorm.weight", {h});
  w.attn.q = load_linear(wl, p + "self_attn.q_proj", qd, h, spec.qkv_bias);
  w.attn.k = load_linear(wl, p + "self_attn.k_proj", kvd, h, spec.qkv_bias);
  w.attn.v = load_linear(wl, p + "self_attn.v_proj", kvd, h, spec.qkv_bias);
  w.attn.o = load_linear(wl, p + "self_attn.o_proj", h, qd, spec.o_bias);
  if (spec.qk_norm) {
    w.attn.q_norm = wl.tensor(p + "self_attn.q_norm.weight", {c.head_dim});
    w.attn.k_norm = wl.tensor(p + "self_attn.k_norm.weight", {c.head_dim});
  }
  w.post_attn_norm = wl.tensor(p + "post_attention_layernorm.weight", {h});
  if (spec.sandwich_norms) {
    w.pre_ff_norm = wl.tensor(p + "pre_feedforward_layernorm.weight", {h});
    w.post_ff_norm = wl.tensor(p + "post_feedforward_layernorm.weight", {h});
  }
  w.mlp.gate = load_linear(wl, p + "mlp.gate_proj", c.intermediate_size, h, spec.mlp_bias);
  w.mlp.up = load_linear(wl, p + "mlp.up_proj", c.intermediate_size, h, spec.mlp_bias);
  w.mlp.down = load_linear(wl, p + "mlp.down_proj", h, c.intermediate_size, spec.mlp_bias);
}

DType activation_dtype(Device device, const LoadOptions& options) {
  if (device == Device::kCPU) return DType::F32;
  if (!options.auto_dtype && options.dtype == DType::F32) return DType::F32;
  return DType::BF16;
}

namespace {

int64_t tensor_bytes(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }

class Decoder final : public Model {
 public:
  Decoder(const ModelConfig& cfg, DecoderSpec spec, const WeightStore& store, const LoadOptions& options)
      : cfg_(cfg), spec_(spec), device_(options.device), act_(activation_dtype(options.device, options)) {
    if (static_cast<int64_t>(cfg_.layer_types.size()) != cfg_.num_layers)
      fail(ErrorCode::kInvalidConfig, "layer_types must have num_hidden_layers entries", "layer_types");
    // First pass checks every tensor's presence, dtype and shape against the config without
    // reading data, so a bad checkpoint fails before any large allocation; the second loads.
    WeightLoader check(store, cfg_, options, /*dry_run=*/true);
    load_tensors(check);
    WeightLoader wl(store, cfg_, options, /*dry_run=*/false);
    load_tensors(wl);
    prepare_weights();
    setup();
    fused_step_ = fused_decode_supported(layers_, spec_, device_, act_);
    if (device_ == Device::kCUDA && decode_graphs_enabled()) graphs_ = std::make_unique<DecodeGraphs>(device_);
    if (device_ == Device::kCUDA && row_graphs_enabled()) row_graphs_ = std::make_unique<RowGraphs>(device_);
    if (fold_norms_requested()) {
      const std::string why = fold_norms_unsupported(layers_, spec_, device_, act_);
      if (why.empty()) folded_ = fold_norms(layers_);
      else std::fprintf(stderr, "mlxb: MLXB_FOLD_NORMS=1 left off for this model: %s\n", why.c_str());
    }
    if (options.progress) options.progress(1.0, "done");
  }

  const ModelConfig& config() const override { return cfg_; }
  GraphCapabilities capabilities() const override { return spec_.caps; }
  Device device() const override { return device_; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  DType kv_dtype() const override { return act_; }

  CacheSet make_caches(int64_t max_tokens) const override {
    if (max_tokens <= 0) fail(ErrorCode::kInvalidArgument, "max_tokens must be positive", "max_tokens");
    CacheSet set;
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      CacheSpec cs;
      cs.device = device_;
      cs.dtype = act_;
      cs.kv_heads = cfg_.num_kv_heads;
      cs.head_dim = cfg_.head_dim;
      cs.max_tokens = max_tokens;
      cs.window = cfg_.layer_types[static_cast<size_t>(i)] == LayerKind::kSliding ? cfg_.sliding_window : 0;
      set.push_back(make_layer_cache(cs));
    }
    return set;
  }

  void forward(const int32_t* ids, int64_t t, CacheSet& caches, float* logits, bool all_rows) override {
    std::lock_guard<std::mutex> lock(mu_);  // one forward at a time: each one uses the whole thread pool
    const int64_t start = check_inputs(ids, t, caches);
    if (t == 1 && graph_step(ids[0], start, caches, logits, nullptr)) return;
    StepInputs step = prepare(start, t);
    Tensor out = compute(upload_ids(ids, t), step, caches, all_rows);
    copy_f32(out, logits);
  }

  void forward_hidden(const int32_t* ids, int64_t t, CacheSet& caches, float* hidden, bool all_rows) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t start = check_inputs(ids, t, caches);
    StepInputs step = prepare(start, t);
    copy_f32(compute_hidden(upload_ids(ids, t), step, caches, all_rows), hidden);
  }

  int32_t forward_argmax(const int32_t* ids, int64_t t, CacheSet& caches) override {
    if (device_ == Device::kCPU) return Model::forward_argmax(ids, t, caches);
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t start = check_inputs(ids, t, caches);
    int32_t next = 0;
    if (t == 1 && graph_step(ids[0], start, caches, nullptr, &next)) return next;
    StepInputs step = prepare(start, t);
    Tensor out = compute(upload_ids(ids, t), step, caches, false);
    Tensor idx = Tensor::empty({1}, DType::I32, device_);
    ops::argmax(out, idx);
    backend(device_).copy(&next, Device::kCPU, idx.data(), device_, sizeof(int32_t));
    return next;
  }

  // Recorded steps chained on the device (DecodeGraphs::chain), a span at a time so that other
  // callers of the model get their turn; eager steps where no recorded step can run.
  void greedy_steps(int32_t id, int64_t n, CacheSet& caches, int32_t* tokens) override {
    constexpr int64_t kSpan = 64;
    for (int64_t i = 0; i < n;) {
      int64_t done = 0;
      if (graphs_) {
        std::lock_guard<std::mutex> lock(mu_);
        check_inputs(&id, 1, caches);
        done = graphs_->chain(id, std::min(kSpan, n - i), caches, [this](int64_t start, StepInputs& base) {
          return graph_base(start, base);
        }, graph_body(caches), tokens + i);
      }
      if (done == 0) {
        tokens[i] = forward_argmax(&id, 1, caches);
        done = 1;
      }
      i += done;
      id = tokens[i - 1];
    }
  }

  // Samples where the logits are (ops::sample): the CUDA path of Sequence; the CPU samples on the host.
  bool forward_sample(const int32_t* ids, int64_t t, CacheSet& caches, const SampleArgs& args, SampleOut& res) override {
    if (device_ == Device::kCPU) return false;
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t start = check_inputs(ids, t, caches);
    std::vector<SampleArgs> rows(1, args);
    rows[0].row = 0;
    if (t == 1 && graph_step(ids[0], start, caches, nullptr, nullptr)) {
      ops::sample(graphs_->last()->logits, rows, &res);
      return true;
    }
    StepInputs step = prepare(start, t);
    Tensor out = compute(upload_ids(ids, t), step, caches, false);
    ops::sample(out, rows, &res);
    return true;
  }

  // Batched rows (decoder_rows.cc).
  void forward_rows(const std::vector<Row>& rows) override {
    std::lock_guard<std::mutex> lock(mu_);
    decoder_forward_rows(parts(), rows);
  }
  bool forward_paged(PagedKVPool& pool, const std::vector<PagedRow>& rows, bool batch_invariant) override {
    std::lock_guard<std::mutex> lock(mu_);
    DecoderParts d = parts();
    d.batch_invariant = batch_invariant;
    decoder_forward_paged(d, pool, rows);
    return true;
  }
  int64_t forward_paged_queue(PagedKVPool& pool, const std::vector<PagedRow>& rows, bool batch_invariant, bool fed) override {
    std::lock_guard<std::mutex> lock(mu_);
    DecoderParts d = parts();
    d.batch_invariant = batch_invariant;
    return decoder_paged_queue(d, pool, rows, fed);
  }
  void forward_paged_collect(int64_t ticket, int32_t* argmax, int64_t n) override {
    decoder_paged_collect(device_, ticket, argmax, n);
  }

 private:
  DecoderParts parts() const {
    DecoderParts d;
    d.cfg = &cfg_;
    d.spec = &spec_;
    d.device = device_;
    d.act = act_;
    d.embed = &embed_;
    d.lm_head = &lm_head_;
    d.layers = &layers_;
    d.final_norm = &final_norm_;
    d.rope_global = rope_global_.get();
    d.rope_local = rope_local_.get();
    d.attn = &attn_params_;
    d.embed_scale = embed_scale();
    d.row_graphs = row_graphs_.get();
    d.folded = folded_.empty() ? nullptr : &folded_;
    return d;
  }

  Tensor upload_ids(const int32_t* ids, int64_t t) const {
    Tensor ids_dev = Tensor::empty({t}, DType::I32, Device::kCPU);
    std::copy(ids, ids + t, ids_dev.ptr<int32_t>());
    return device_ == Device::kCPU ? ids_dev : ids_dev.to(device_);
  }

  // The graph: logits [t or 1, vocab] in the activation dtype on the model's device.
  Tensor compute(const Tensor& ids_dev, const StepInputs& step, CacheSet& caches, bool all_rows) {
    Tensor fin = compute_hidden(ids_dev, step, caches, all_rows);
    Tensor out = Tensor::empty({fin.dim(0), cfg_.vocab_size}, act_, device_);
    linear(fin, lm_head_, out);
    if (spec_.final_softcap > 0.0f) ops::softcap(out, spec_.final_softcap);
    return out;
  }

  // The layers and the final norm: hidden states [t or 1, hidden] in the activation dtype.
  Tensor compute_hidden(const Tensor& ids_dev, const StepInputs& step, CacheSet& caches, bool all_rows) {
    const int64_t t = step.t, h = cfg_.hidden_size;
    Tensor x = Tensor::empty({t, h}, act_, device_);
    if (embed_.quantized()) ops::qembedding(embed_.q, ids_dev, embed_scale(), x);
    else ops::embedding(embed_.w, ids_dev, embed_scale(), x);
    Tensor normed = Tensor::empty({t, h}, act_, device_);
    Tensor branch = Tensor::empty({t, h}, act_, device_);
    const float eps = static_cast<float>(cfg_.norm_eps);
    const bool one = spec_.norm_add_one;
    bool pending = false;  // the last block's output (branch) is still to be added to x
    if (t == 1 && fused_step_) fused_decode_layers(x, layers_, attn_params_, caches, step, eps, one, cfg_.hidden_act);
    for (int64_t i = 0; i < cfg_.num_layers && !(t == 1 && fused_step_); ++i) {
      const LayerWeights& w = layers_[static_cast<size_t>(i)];
      if (pending) ops::add_rms_norm(x, branch, w.input_norm, eps, one, normed);
      else ops::rms_norm(x, w.input_norm, eps, one, normed);
      attention_block(normed, w.attn, attn_params_[static_cast<size_t>(i)], *caches[static_cast<size_t>(i)], step, branch);
      if (spec_.sandwich_norms) ops::rms_norm(branch, w.post_attn_norm, eps, one, branch);
      ops::add_rms_norm(x, branch, spec_.sandwich_norms ? w.pre_ff_norm : w.post_attn_norm, eps, one, normed);
      mlp_block(normed, w.mlp, cfg_.hidden_act, step, branch);
      if (spec_.sandwich_norms) ops::rms_norm(branch, w.post_ff_norm, eps, one, branch);
      pending = true;
    }
    const int64_t rows = all_rows ? t : 1;
    Tensor fin = Tensor::empty({rows, h}, act_, device_);
    if (pending && rows == t) {
      ops::add_rms_norm(x, branch, final_norm_, eps, one, fin);
    } else {
      if (pending) ops::add(x, branch, x);
      ops::rms_norm(all_rows ? x : x.slice_rows(t - 1, t), final_norm_, eps, one, fin);
    }
    return fin;
  }

  // The inputs a recorded step at `start` is captured with; false when it must run eagerly.
  bool graph_base(int64_t start, StepInputs& base) const {
    if (!rope_global_->fixed(start + 1) || (rope_local_ && !rope_local_->fixed(start + 1))) return false;
    base = StepInputs();
    base.t = 1;
    base.act = act_;
    base.device = device_;
    base.pos.assign(1, static_cast<int32_t>(start));
    base.rope_full = rope_global_->args(start + 1);
    if (rope_local_) base.rope_local = rope_local_->args(start + 1);
    return true;
  }

  // What a recorded step runs: the decoder, float32 logits, and their argmax written over the
  // step's own token slot (which chained greedy steps read as their next token).
  DecodeGraphs::Body graph_body(CacheSet& caches) {
    return [this, &caches](const Tensor& ids_dev, const StepInputs& step) {
      DecodeGraphs::Outputs o;
      Tensor out = compute(ids_dev, step, caches, false);
      o.logits = Tensor::empty(out.shape(), DType::F32, device_);
      ops::convert(out, o.logits);
      o.next = ids_dev;
      ops::argmax(out, o.next);
      return o;
    };
  }

  // A one-token step through a recorded graph (CUDA); false when it must run eagerly.
  bool graph_step(int32_t id, int64_t start, CacheSet& caches, float* logits, int32_t* next) {
    StepInputs base;
    if (!graphs_ || !graph_base(start, base)) return false;
    return graphs_->run(id, caches, base, graph_body(caches), logits, next);
  }

  void load_tensors(WeightLoader& wl) {
    const int64_t h = cfg_.hidden_size;
    embed_ = load_linear(wl, "model.embed_tokens", cfg_.vocab_size, h, false);
    LayerLoader ll = spec_.load_layer ? spec_.load_layer : load_llama_layer;
    layers_.assign(static_cast<size_t>(cfg_.num_layers), LayerWeights{});
    // On CUDA, q/k/v and gate/up are fused layer by layer (the parts' memory is then reused by
    // the next layer's loads rather than cached twice).
    const bool fuse = device_ == Device::kCUDA && !wl.dry_run();
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      LayerWeights& w = layers_[static_cast<size_t>(i)];
      ll(wl, spec_, i, w);
      if (fuse) fuse_projections(w.attn, w.mlp);
    }
    final_norm_ = wl.tensor("model.norm.weight", {h});
    lm_head_ = cfg_.tie_word_embeddings ? embed_ : load_linear(wl, "lm_head", cfg_.vocab_size, h, false);
  }

  // Every dense weight in the layout its backend's matmul reads fastest (ops::prepare_weight: the
  // CPU's four-row blocks for bf16 on its bf16-dot path; CUDA keeps them as they are), and every
  // quantized one (ops::prepare_qweight: the CPU's 8-row tiles of 4-bit weights). The parts
  // of a fused projection (q/k/v, gate/up) become row views of the prepared fused weight, as they
  // were of the fused one (no second copy); where the layout cannot cut at a part's rows, the
  // fused weight and its parts stay as loaded. A tied head stays the embedding table's tensor.
  void prepare_weights() {
    auto prep = [](Linear& l) {
      if (l.w.defined()) l.w = ops::prepare_weight(l.w);
      else if (l.quantized()) l.q = ops::prepare_qweight(l.q);
    };
    // The prepared fused weight `all` and its parts' row views (cut(all, r0, r1), undefined where the
    // layout cannot cut), stored through `member` only when every part can be cut.
    auto refit = [](Linear& fused, std::initializer_list<Linear*> parts, auto all, auto cut, auto member) {
      std::vector<decltype(all)> views;
      int64_t row = 0;
      for (Linear* p : parts) {
        views.push_back(cut(all, row, row + p->out));
        row += p->out;
      }
      for (const auto& v : views)
        if (!defined(v)) return;
      member(fused) = all;
      size_t i = 0;
      for (Linear* p : parts) member(*p) = views[i++];
    };
    auto prep_fused = [&](Linear& fused, std::initializer_list<Linear*> parts) {
      if (fused.quantized()) {  // likewise for a quantized one (the CPU's 8-row tiles of 4-bit weights)
        refit(fused, parts, ops::prepare_qweight(fused.q), quant::row_view, [](Linear& l) -> QuantWeight& { return l.q; });
      } else if (fused.w.defined()) {
        refit(fused, parts, ops::prepare_weight(fused.w), ops::prepared_rows, [](Linear& l) -> Tensor& { return l.w; });
      } else {
        for (Linear* p : parts) prep(*p);
      }
    };
    for (LayerWeights& w : layers_) {
      prep_fused(w.attn.qkv, {&w.attn.q, &w.attn.k, &w.attn.v});
      prep_fused(w.mlp.gate_up, {&w.mlp.gate, &w.mlp.up});
      prep(w.attn.o);
      prep(w.mlp.down);
    }
    prep(embed_);
    if (cfg_.tie_word_embeddings) lm_head_ = embed_;
    else prep(lm_head_);
  }

  void setup() {
    rope_global_ = std::make_unique<RopeTable>(cfg_.rope, cfg_.head_dim, cfg_.max_position_embeddings, device_);
    if (cfg_.rope_local)
      rope_local_ = std::make_unique<RopeTable>(*cfg_.rope_local, cfg_.head_dim, cfg_.max_position_embeddings, device_);
    // head_dim ** -0.5 in double, then float, as transformers' `self.scaling`
    const float scale = spec_.attn_scale > 0.0f ? spec_.attn_scale
                                                : static_cast<float>(std::pow(static_cast<double>(cfg_.head_dim), -0.5));
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      const bool sliding = cfg_.layer_types[static_cast<size_t>(i)] == LayerKind::kSliding;
      AttentionParams p;
      p.heads = cfg_.num_heads;
      p.kv_heads = cfg_.num_kv_heads;
      p.head_dim = cfg_.head_dim;
      p.norm_eps = static_cast<float>(cfg_.norm_eps);
      p.norm_add_one = spec_.norm_add_one;
      p.args.scale = scale;
      p.args.softcap = spec_.attn_softcap;
      p.args.window = sliding ? cfg_.sliding_window : 0;
      p.args.causal = true;
      p.local_rope = sliding && rope_local_ != nullptr;
      attn_params_.push_back(p);
      if (sliding) spec_.caps.sliding_window = true;
    }
    spec_.caps.logit_softcap = spec_.attn_softcap > 0.0f || spec_.final_softcap > 0.0f;

    weight_bytes_ = embed_.bytes() + tensor_bytes(final_norm_) + (cfg_.tie_word_embeddings ? 0 : lm_head_.bytes());
    for (const LayerWeights& w : layers_) {
      for (const Tensor* n : {&w.input_norm, &w.post_attn_norm, &w.pre_ff_norm, &w.post_ff_norm, &w.attn.q_norm, &w.attn.k_norm})
        weight_bytes_ += tensor_bytes(*n);
      for (const Linear* l : {&w.attn.q, &w.attn.k, &w.attn.v, &w.attn.o, &w.mlp.gate, &w.mlp.up, &w.mlp.down})
        weight_bytes_ += l->bytes();
    }
  }

  float embed_scale() const {
    if (!spec_.scale_embeddings) return 1.0f;
    // transformers multiplies by sqrt(hidden) cast to the activation dtype
    const float s = std::sqrt(static_cast<float>(cfg_.hidden_size));
    return act_ == DType::BF16 ? bf16_to_f32(f32_to_bf16(s)) : act_ == DType::F16 ? f16_to_f32(f32_to_f16(s)) : s;
  }

  // Checks ids and caches; returns the position of the first token.
  int64_t check_inputs(const int32_t* ids, int64_t t, CacheSet& caches) const {
    if (t <= 0) fail(ErrorCode::kInvalidArgument, "forward needs at least one token", "ids");
    if (static_cast<int64_t>(caches.size()) != cfg_.num_layers)
      fail(ErrorCode::kInvalidArgument, "cache set has " + std::to_string(caches.size()) + " layers, the model " +
                                            std::to_string(cfg_.num_layers), "caches");
    for (int64_t i = 0; i < t; ++i)
      if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
        fail(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                              " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")", "ids");
    const int64_t start = caches[0]->length();
    for (const auto& c : caches)
      if (c->length() != start) fail(ErrorCode::kInternal, "layer caches disagree on the sequence length");
    if (start + t > int64_t{INT32_MAX}) fail(ErrorCode::kInvalidArgument, "sequence too long", "ids");
    return start;
  }

  StepInputs prepare(int64_t start, int64_t t) const {
    StepInputs s;
    s.t = t;
    s.act = act_;
    s.device = device_;
    s.pos.resize(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) s.pos[static_cast<size_t>(i)] = static_cast<int32_t>(start + i);
    Tensor host = Tensor::empty({t}, DType::I32, Device::kCPU);
    std::copy(s.pos.begin(), s.pos.end(), host.ptr<int32_t>());
    s.pos_dev = device_ == Device::kCPU ? host : host.to(device_);
    s.rope_full = rope_global_->args(start + t);
    if (rope_local_) s.rope_local = rope_local_->args(start + t);
    return s;
  }

  // A device tensor's values as float32 in host memory `dst`.
  void copy_f32(const Tensor& out, float* dst) const {
    Tensor f = out;
    if (out.dtype() != DType::F32) {
      f = Tensor::empty(out.shape(), DType::F32, device_);
      ops::convert(out, f);
    }
    backend(device_).copy(dst, Device::kCPU, f.data(), device_, f.nbytes());
  }

  ModelConfig cfg_;
  DecoderSpec spec_;
  Device device_;
  DType act_;
  Linear embed_, lm_head_;
  std::vector<LayerWeights> layers_;
  Tensor final_norm_;
  std::unique_ptr<RopeTable> rope_global_, rope_local_;
  std::vector<AttentionParams> attn_params_;
  int64_t weight_bytes_ = 0;
  std::unique_ptr<DecodeGraphs> graphs_;  // CUDA only, unless MLXB_CUDA_GRAPH=0
  std::unique_ptr<RowGraphs> row_graphs_;  // the engine's batched decode steps (CUDA; rows_graph.h)
  std::vector<FoldedLayer> folded_;          // folded norms for batched CUDA steps (MLXB_FOLD_NORMS=1; fold_norms.h)
  bool fused_step_ = false;                // one-token steps through decode_fused.h
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<Model> build_decoder(const ModelConfig& cfg, DecoderSpec spec, const WeightStore& store,
                                     const LoadOptions& options) {
  return std::make_unique<Decoder>(cfg, spec, store, options);
}

}  // namespace mlxb
