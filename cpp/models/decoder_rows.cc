// Batched forward of the shared decoder (see decoder_rows.h): the layer loop and forward_rows;
// the paged entry point is decoder_paged.cc.
#include "models/decoder_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "models/decoder_rows_impl.h"
#include "models/step_profile.h"

namespace mlxb {

namespace batched {

namespace {

// y = x W^T in slices of at most `chunk` rows (0: one call).
void linear_in(const Tensor& x, const Linear& l, Tensor& y, int64_t chunk) {
  const int64_t m = x.dim(0);
  if (chunk <= 0 || m <= chunk) {
    linear(x, l, y);
    return;
  }
  for (int64_t a = 0; a < m; a += chunk) {
    const int64_t e = std::min(m, a + chunk);
    Tensor ys = y.slice_rows(a, e);
    linear(x.slice_rows(a, e), l, ys);
  }
}

// out = act(x gate^T) * (x up^T) through a fused dense [gate; up] weight, in slices of at most
// `chunk` rows (0: one call).
void gated_in(const Tensor& x, const Linear& gate_up, Activation act, Tensor& out, int64_t chunk) {
  const Tensor* bias = gate_up.bias.defined() ? &gate_up.bias : nullptr;
  const int64_t m = x.dim(0);
  if (chunk <= 0 || m <= chunk) {
    ops::gated_matmul(x, gate_up.w, bias, act, out);
    return;
  }
  for (int64_t a = 0; a < m; a += chunk) {
    const int64_t e = std::min(m, a + chunk);
    Tensor os = out.slice_rows(a, e);
    ops::gated_matmul(x.slice_rows(a, e), gate_up.w, bias, act, os);
  }
}

void apply_rope(const Batch& b, Tensor& x3, bool local) {
  if (b.shared_rope) {
    ops::rope(x3, b.pos_dev, local ? b.local[0] : b.full[0]);
    return;
  }
  for (size_t r = 0; r < b.offset.size(); ++r) {
    Tensor xs = x3.slice_rows(b.offset[r], b.offset[r] + b.count[r]);
    ops::rope(xs, b.pos_dev.slice_rows(b.offset[r], b.offset[r] + b.count[r]), local ? b.local[r] : b.full[r]);
  }
}

}  // namespace

void check_row(const DecoderParts& d, const int32_t* ids, int64_t t, int64_t start) {
  const int64_t vocab = d.cfg->vocab_size;
  if (t <= 0 || ids == nullptr) fail(ErrorCode::kInvalidArgument, "forward needs at least one token", "ids");
  for (int64_t i = 0; i < t; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")", "ids");
  if (start < 0 || start + t > int64_t{INT32_MAX}) fail(ErrorCode::kInvalidArgument, "sequence too long", "ids");
}

void plan_rows(const DecoderParts& d, Batch& b) {
  const size_t n = b.offset.size();
  b.full.resize(n);
  b.local.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < b.count[r]; ++k) b.pos.push_back(static_cast<int32_t>(b.start[r] + k));
    const int64_t seq = b.start[r] + b.count[r];
    b.full[r] = d.rope_global->args(seq);
    if (d.rope_local) b.local[r] = d.rope_local->args(seq);
    auto same = [](const RopeArgs& a, const RopeArgs& c) {
      return a.inv_freq.defined() == c.inv_freq.defined() && (!a.inv_freq.defined() || a.inv_freq.data() == c.inv_freq.data()) &&
             a.mscale == c.mscale;
    };
    if (!same(b.full[r], b.full[0]) || (d.rope_local && !same(b.local[r], b.local[0]))) b.shared_rope = false;
  }
}

Tensor upload_i32(const std::vector<int32_t>& v, Device device) {
  Tensor host = Tensor::wrap(const_cast<int32_t*>(v.data()), {static_cast<int64_t>(v.size())}, DType::I32);
  return host.to(device);  // an owned copy (also on the CPU)
}

namespace {

// The final norm and LM head of the activation rows `sel` of x (see run_layers).
Tensor head(const DecoderParts& d, const Tensor& x, const Tensor& sel_dev, int64_t n_sel, int64_t chunk) {
  if (n_sel == 0) return Tensor();
  const ModelConfig& c = *d.cfg;
  Tensor last = Tensor::empty({n_sel, c.hidden_size}, d.act, d.device);
  ops::embedding(x, sel_dev, 1.0f, last);  // row gather (times 1.0: exact)
  ops::rms_norm(last, *d.final_norm, static_cast<float>(c.norm_eps), d.spec->norm_add_one, last);
  Tensor out = Tensor::empty({n_sel, c.vocab_size}, d.act, d.device);
  linear_in(last, *d.lm_head, out, chunk);
  if (d.spec->final_softcap > 0.0f) ops::softcap(out, d.spec->final_softcap);
  return out;
}

// run_layers over the folded layers (fold_norms.h): per layer the q/k/v GEMM of the residual, the
// attention (its callback scales the rows), o added into the residual by its GEMM, the gate/up
// GEMM of the residual, the scaled activation and down added into the residual.
Tensor run_folded(const DecoderParts& d, const Batch& b, const Tensor& sel_dev, int64_t n_sel, const AttentionFn& attend) {
  const ModelConfig& c = *d.cfg;
  const int64_t t = b.total, h = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);
  StepProfile& prof = StepProfile::get();
  Tensor x = Tensor::empty({t, h}, d.act, d.device);
  if (d.embed->quantized()) ops::qembedding(d.embed->q, b.ids_dev, d.embed_scale, x);
  else ops::embedding(d.embed->w, b.ids_dev, d.embed_scale, x);
  const RowScale scale{&x, eps};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = (*d.layers)[static_cast<size_t>(i)];
    const FoldedLayer& fl = (*d.folded)[static_cast<size_t>(i)];
    const AttentionParams& p = (*d.attn)[static_cast<size_t>(i)];
    const int64_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim, width = qd + 2 * kvd;
    Tensor qkv = Tensor::empty({t, width}, d.act, d.device);
    ops::matmul(x, fl.qkv.w, nullptr, qkv);
    prof.mark(StepProfile::kQkv);
    Tensor q3 = qkv.as_strided({t, p.heads, p.head_dim}, {width, p.head_dim, 1}, 0);
    Tensor k3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd);
    Tensor v3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd + kvd);
    Tensor o3 = Tensor::empty({t, p.heads, p.head_dim}, d.act, d.device);
    attend(i, p, q3, k3, v3, o3, p.local_rope ? &b.local[0] : &b.full[0], &scale);
    ops::matmul_accumulate(o3.reshape({t, qd}), w.attn.o.w, x);
    prof.mark(StepProfile::kOut);
    const int64_t f = w.mlp.gate.out;
    Tensor gu = Tensor::empty({t, 2 * f}, d.act, d.device);
    ops::matmul(x, fl.gate_up.w, nullptr, gu);
    Tensor gate = Tensor::empty({t, f}, d.act, d.device);
    ops::rms_scaled_gated_act(gu, x, eps, c.hidden_act, gate);
    prof.mark(StepProfile::kGateUp);
    ops::matmul_accumulate(gate, w.mlp.down.w, x);
    prof.mark(StepProfile::kDown);
  }
  return head(d, x, sel_dev, n_sel, 0);
}

}  // namespace

Tensor run_layers(const DecoderParts& d, const Batch& b, const Tensor& sel_dev, int64_t n_sel, const AttentionFn& attend,
                  const LayerPlan& plan) {
  if (plan.fold) {
    if (!d.folded || !plan.fuse || !plan.attend_ropes || !b.shared_rope || d.batch_invariant)
      fail(ErrorCode::kInternal, "run_layers: a folded step needs folded layers, fused projections and shared rope");
    return run_folded(d, b, sel_dev, n_sel, attend);
  }
  const ModelConfig& c = *d.cfg;
  const DecoderSpec& spec = *d.spec;
  const int64_t t = b.total, h = c.hidden_size;
  const int64_t chunk = d.batch_invariant && d.device != Device::kCPU ? kInvariantRows : 0;
  const float eps = static_cast<float>(c.norm_eps);
  StepProfile& prof = StepProfile::get();
  Tensor x = Tensor::empty({t, h}, d.act, d.device);
  if (d.embed->quantized()) ops::qembedding(d.embed->q, b.ids_dev, d.embed_scale, x);
  else ops::embedding(d.embed->w, b.ids_dev, d.embed_scale, x);
  Tensor normed = Tensor::empty({t, h}, d.act, d.device);
  Tensor branch = Tensor::empty({t, h}, d.act, d.device);
  const bool one = spec.norm_add_one;
  bool pending = false;  // the last block's output (branch) is still to be added to x
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = (*d.layers)[static_cast<size_t>(i)];
    const AttentionParams& p = (*d.attn)[static_cast<size_t>(i)];
    if (pending) ops::add_rms_norm(x, branch, w.input_norm, eps, one, normed);
    else ops::rms_norm(x, w.input_norm, eps, one, normed);
    prof.mark(StepProfile::kNorm);
    {
      const int64_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
      const bool fuse_qkv = plan.fuse && plan.attend_ropes && !w.attn.q_norm.defined() && !w.attn.k_norm.defined() &&
                            (w.attn.qkv.w.defined() || w.attn.qkv.quantized());
      Tensor q3, k3, v3;
      if (fuse_qkv) {
        const int64_t width = qd + 2 * kvd;
        Tensor qkv = Tensor::empty({t, width}, d.act, d.device);
        linear_in(normed, w.attn.qkv, qkv, chunk);
        q3 = qkv.as_strided({t, p.heads, p.head_dim}, {width, p.head_dim, 1}, 0);
        k3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd);
        v3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd + kvd);
      } else {
        Tensor q = Tensor::empty({t, qd}, d.act, d.device);
        Tensor k = Tensor::empty({t, kvd}, d.act, d.device);
        Tensor v = Tensor::empty({t, kvd}, d.act, d.device);
        linear_in(normed, w.attn.q, q, chunk);
        linear_in(normed, w.attn.k, k, chunk);
        linear_in(normed, w.attn.v, v, chunk);
        q3 = q.reshape({t, p.heads, p.head_dim});
        k3 = k.reshape({t, p.kv_heads, p.head_dim});
        v3 = v.reshape({t, p.kv_heads, p.head_dim});
      }
      prof.mark(StepProfile::kQkv);
      if (w.attn.q_norm.defined()) ops::rms_norm(q3, w.attn.q_norm, p.norm_eps, p.norm_add_one, q3);
      if (w.attn.k_norm.defined()) ops::rms_norm(k3, w.attn.k_norm, p.norm_eps, p.norm_add_one, k3);
      const RopeArgs* rope = nullptr;
      if (plan.attend_ropes) {
        rope = p.local_rope ? &b.local[0] : &b.full[0];
      } else {
        apply_rope(b, q3, p.local_rope);
        apply_rope(b, k3, p.local_rope);
      }
      Tensor o3 = Tensor::empty({t, p.heads, p.head_dim}, d.act, d.device);
      attend(i, p, q3, k3, v3, o3, rope, nullptr);
      linear_in(o3.reshape({t, qd}), w.attn.o, branch, chunk);
      prof.mark(StepProfile::kOut);
    }
    if (spec.sandwich_norms) ops::rms_norm(branch, w.post_attn_norm, eps, one, branch);
    ops::add_rms_norm(x, branch, spec.sandwich_norms ? w.pre_ff_norm : w.post_attn_norm, eps, one, normed);
    prof.mark(StepProfile::kNorm);
    {
      const int64_t f = w.mlp.gate.out;
      Tensor gate = Tensor::empty({t, f}, d.act, d.device);
      if (plan.fuse && w.mlp.gate_up.w.defined()) {
        gated_in(normed, w.mlp.gate_up, c.hidden_act, gate, chunk);
      } else {
        Tensor up = Tensor::empty({t, f}, d.act, d.device);
        linear_in(normed, w.mlp.gate, gate, chunk);
        linear_in(normed, w.mlp.up, up, chunk);
        ops::gated_act(gate, up, c.hidden_act, gate);
      }
      prof.mark(StepProfile::kGateUp);
      linear_in(gate, w.mlp.down, branch, chunk);
      prof.mark(StepProfile::kDown);
    }
    if (spec.sandwich_norms) ops::rms_norm(branch, w.post_ff_norm, eps, one, branch);
    pending = true;
  }
  if (pending) ops::add(x, branch, x);
  return head(d, x, sel_dev, n_sel, chunk);
}

void copy_logits(const DecoderParts& d, const Tensor& out, const std::vector<float*>& dst) {
  Tensor f = out;
  if (out.dtype() != DType::F32) {
    f = Tensor::empty(out.shape(), DType::F32, d.device);
    ops::convert(out, f);
  }
  const int64_t vocab = out.dim(1);
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(float));
  Backend& be = backend(d.device);
  std::vector<float> host;
  const float* src = f.ptr<float>();
  if (d.device != Device::kCPU) {
    host.resize(static_cast<size_t>(f.numel()));
    be.copy(host.data(), Device::kCPU, f.data(), d.device, f.nbytes());
    src = host.data();
  }
  for (size_t i = 0; i < dst.size(); ++i)
    if (dst[i]) std::memcpy(dst[i], src + static_cast<int64_t>(i) * vocab, static_cast<size_t>(row_bytes));
}

}  // namespace batched

using namespace batched;

void decoder_forward_rows(const DecoderParts& d, const std::vector<Model::Row>& rows) {
  if (rows.empty()) return;
  const int64_t vocab = d.cfg->vocab_size;
  Batch b;
  std::vector<int32_t> sel;
  std::vector<float*> dst;
  for (const Model::Row& r : rows) {
    if (!r.caches || static_cast<int64_t>(r.caches->size()) != d.cfg->num_layers)
      fail(ErrorCode::kInvalidArgument, "a row's cache set does not match the model's layers", "caches");
    const int64_t start = (*r.caches)[0]->length();
    for (const auto& c : *r.caches)
      if (c->length() != start) fail(ErrorCode::kInternal, "layer caches disagree on the sequence length");
    check_row(d, r.ids, r.t, start);
    b.offset.push_back(b.total);
    b.count.push_back(r.t);
    b.start.push_back(start);
    b.ids.insert(b.ids.end(), r.ids, r.ids + r.t);
    for (int64_t k = r.all_rows ? 0 : r.t - 1; k < r.t; ++k) {
      sel.push_back(static_cast<int32_t>(b.total + k));
      dst.push_back(r.logits ? r.logits + (r.all_rows ? k : 0) * vocab : nullptr);
    }
    b.total += r.t;
  }
  plan_rows(d, b);
  b.ids_dev = upload_i32(b.ids, d.device);
  b.pos_dev = upload_i32(b.pos, d.device);
  Tensor sel_dev = upload_i32(sel, d.device);
  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                           const RopeArgs*, const RowScale*) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t a = b.offset[r], e = a + b.count[r];
      LayerCache& cache = *(*rows[r].caches)[static_cast<size_t>(layer)];
      const KVView kv = cache.update(k3.slice_rows(a, e), v3.slice_rows(a, e), b.pos.data() + a, e - a);
      Tensor os = o3.slice_rows(a, e);
      ops::attention(q3.slice_rows(a, e), kv.k, kv.v, b.pos_dev.slice_rows(a, e), kv.pos, p.args, os);
    }
  };
  Tensor out = run_layers(d, b, sel_dev, static_cast<int64_t>(sel.size()), attend);
  copy_logits(d, out, dst);
}

}  // namespace mlxb
