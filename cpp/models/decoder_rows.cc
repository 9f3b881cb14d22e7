// Batched forward of the shared decoder (see decoder_rows.h).
#include "models/decoder_rows.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

namespace mlxb {

namespace {

// Rows of a CUDA linear in batch-invariant mode: the GEMV kernel's limit (cuda/matmul.cu), whose
// per-row reduction order does not depend on M.
constexpr int64_t kInvariantRows = 8;
// On CUDA (fast mode), rows with more query tokens than this gather their keys and use the
// flash kernel; shorter rows share one paged_attention launch.
constexpr int64_t kPagedMaxQuery = 16;

// One step's rows, flattened: token k of row r is activation row offset[r] + k.
struct Batch {
  int64_t total = 0;
  std::vector<int64_t> offset, count, start;
  std::vector<int32_t> ids, pos;  // host, [total]
  Tensor ids_dev, pos_dev;        // on the model's device
  bool shared_rope = true;        // every row uses the same frequencies (all but dynamic NTK)
  std::vector<RopeArgs> full, local;  // per row (all equal when shared_rope)
};

void check_row(const DecoderParts& d, const int32_t* ids, int64_t t, int64_t start) {
  const int64_t vocab = d.cfg->vocab_size;
  if (t <= 0 || ids == nullptr) fail(ErrorCode::kInvalidArgument, "forward needs at least one token", "ids");
  for (int64_t i = 0; i < t; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")", "ids");
  if (start < 0 || start + t > int64_t{INT32_MAX}) fail(ErrorCode::kInvalidArgument, "sequence too long", "ids");
}

// Fills positions and rope arguments; ids/pos_dev are uploaded by the caller (with its other
// per-step integers when it has some).
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

// Attention of one layer for all rows: q3 [T, Hq, D], k3/v3 [T, Hkv, D] (after rope) -> o3.
using AttentionFn = std::function<void(int64_t layer, const AttentionParams& p, const Tensor& q3, const Tensor& k3,
                                       const Tensor& v3, Tensor& o3)>;

// Embedding, every layer, and the final norm + LM head of the activation rows `sel` (host
// indices). Returns logits [sel.size(), vocab] in the activation dtype on the model's device.
Tensor run_layers(const DecoderParts& d, const Batch& b, const Tensor& sel_dev, int64_t n_sel, const AttentionFn& attend) {
  const ModelConfig& c = *d.cfg;
  const DecoderSpec& spec = *d.spec;
  const int64_t t = b.total, h = c.hidden_size;
  const int64_t chunk = d.batch_invariant && d.device != Device::kCPU ? kInvariantRows : 0;
  const float eps = static_cast<float>(c.norm_eps);
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
    {
      Tensor q = Tensor::empty({t, p.heads * p.head_dim}, d.act, d.device);
      Tensor k = Tensor::empty({t, p.kv_heads * p.head_dim}, d.act, d.device);
      Tensor v = Tensor::empty({t, p.kv_heads * p.head_dim}, d.act, d.device);
      linear_in(normed, w.attn.q, q, chunk);
      linear_in(normed, w.attn.k, k, chunk);
      linear_in(normed, w.attn.v, v, chunk);
      Tensor q3 = q.reshape({t, p.heads, p.head_dim});
      Tensor k3 = k.reshape({t, p.kv_heads, p.head_dim});
      Tensor v3 = v.reshape({t, p.kv_heads, p.head_dim});
      if (w.attn.q_norm.defined()) ops::rms_norm(q3, w.attn.q_norm, p.norm_eps, p.norm_add_one, q3);
      if (w.attn.k_norm.defined()) ops::rms_norm(k3, w.attn.k_norm, p.norm_eps, p.norm_add_one, k3);
      apply_rope(b, q3, p.local_rope);
      apply_rope(b, k3, p.local_rope);
      Tensor o3 = Tensor::empty({t, p.heads, p.head_dim}, d.act, d.device);
      attend(i, p, q3, k3, v3, o3);
      linear_in(o3.reshape({t, p.heads * p.head_dim}), w.attn.o, branch, chunk);
    }
    if (spec.sandwich_norms) ops::rms_norm(branch, w.post_attn_norm, eps, one, branch);
    ops::add_rms_norm(x, branch, spec.sandwich_norms ? w.pre_ff_norm : w.post_attn_norm, eps, one, normed);
    {
      const int64_t f = w.mlp.gate.out;
      Tensor gate = Tensor::empty({t, f}, d.act, d.device);
      Tensor up = Tensor::empty({t, f}, d.act, d.device);
      linear_in(normed, w.mlp.gate, gate, chunk);
      linear_in(normed, w.mlp.up, up, chunk);
      ops::gated_act(gate, up, c.hidden_act, gate);
      linear_in(gate, w.mlp.down, branch, chunk);
    }
    if (spec.sandwich_norms) ops::rms_norm(branch, w.post_ff_norm, eps, one, branch);
    pending = true;
  }
  if (pending) ops::add(x, branch, x);
  if (n_sel == 0) return Tensor();
  Tensor last = Tensor::empty({n_sel, h}, d.act, d.device);
  ops::embedding(x, sel_dev, 1.0f, last);  // row gather (times 1.0: exact)
  ops::rms_norm(last, *d.final_norm, eps, one, last);
  Tensor out = Tensor::empty({n_sel, c.vocab_size}, d.act, d.device);
  linear_in(last, *d.lm_head, out, chunk);
  if (spec.final_softcap > 0.0f) ops::softcap(out, spec.final_softcap);
  return out;
}

// Copies rows of device logits [n, vocab] (activation dtype) as f32 to host destinations.
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

}  // namespace

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
  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, const Tensor& q3, const Tensor& k3, const Tensor& v3,
                           Tensor& o3) {
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

void decoder_forward_paged(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows) {
  if (rows.empty()) return;
  const PagedSpec& ps = pool.spec();
  if (ps.layers != d.cfg->num_layers || ps.kv_heads != d.cfg->num_kv_heads || ps.head_dim != d.cfg->head_dim ||
      ps.device != d.device)
    fail(ErrorCode::kInvalidArgument, "the KV pool does not match the model", "pool");
  const int64_t bs = ps.block_size;
  const bool cuda_fast = d.device != Device::kCPU && !d.batch_invariant;
  Batch b;
  // Host integers of the step, uploaded once: ids, positions, kv slots, selected rows, the paged
  // rows' tables and the gather slots of long rows. Each section is a view of one device buffer.
  std::vector<int32_t> slots, sel, q_off, q_cnt, kv_len, gather;
  std::vector<size_t> paged, long_rows;
  std::vector<int64_t> gather_off;
  int64_t max_blocks = 1, max_q = 1, max_len = 1;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Model::PagedRow& r = rows[i];
    check_row(d, r.ids, r.t, r.start);
    const int64_t len = r.start + r.t;
    if (!r.blocks || static_cast<int64_t>(r.blocks->size()) * bs < len)
      fail(ErrorCode::kInternal, "paged row: block table does not cover position " + std::to_string(len - 1));
    for (int32_t blk : *r.blocks)
      if (blk < 0 || blk >= ps.num_blocks) fail(ErrorCode::kInternal, "paged row: block id outside the pool");
    b.offset.push_back(b.total);
    b.count.push_back(r.t);
    b.start.push_back(r.start);
    b.ids.insert(b.ids.end(), r.ids, r.ids + r.t);
    for (int64_t p = r.start; p < len; ++p)
      slots.push_back(static_cast<int32_t>((*r.blocks)[static_cast<size_t>(p / bs)] * bs + p % bs));
    if (r.logits || r.argmax) sel.push_back(static_cast<int32_t>(b.total + r.t - 1));
    if (cuda_fast && r.t > kPagedMaxQuery) {
      long_rows.push_back(i);
      gather_off.push_back(static_cast<int64_t>(gather.size()));
      for (int64_t p = 0; p < len; ++p)
        gather.push_back(static_cast<int32_t>((*r.blocks)[static_cast<size_t>(p / bs)] * bs + p % bs));
    } else {
      paged.push_back(i);
      q_off.push_back(static_cast<int32_t>(b.total));
      q_cnt.push_back(static_cast<int32_t>(r.t));
      kv_len.push_back(static_cast<int32_t>(len));
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      max_q = std::max(max_q, r.t);
      max_len = std::max(max_len, len);
    }
    b.total += r.t;
  }
  plan_rows(d, b);
  std::vector<int32_t> table(paged.size() * static_cast<size_t>(max_blocks), 0);
  for (size_t k = 0; k < paged.size(); ++k) {
    const std::vector<int32_t>& bl = *rows[paged[k]].blocks;
    const int64_t need = (int64_t{kv_len[k]} + bs - 1) / bs;
    std::copy(bl.begin(), bl.begin() + need, table.begin() + static_cast<int64_t>(k) * max_blocks);
  }
  int64_t longest = 1;
  for (size_t k = 0; k < long_rows.size(); ++k) longest = std::max(longest, b.start[long_rows[k]] + b.count[long_rows[k]]);
  std::vector<int32_t> iota(long_rows.empty() ? 0 : static_cast<size_t>(longest));
  for (size_t k = 0; k < iota.size(); ++k) iota[k] = static_cast<int32_t>(k);

  std::vector<int32_t> all;
  std::vector<int64_t> at;
  for (const std::vector<int32_t>* part : {&b.ids, &b.pos, &slots, &sel, &q_off, &q_cnt, &kv_len, &table, &gather, &iota}) {
    at.push_back(static_cast<int64_t>(all.size()));
    all.insert(all.end(), part->begin(), part->end());
  }
  at.push_back(static_cast<int64_t>(all.size()));
  Tensor dev = upload_i32(all, d.device);
  auto part = [&](int idx) { return dev.slice_rows(at[static_cast<size_t>(idx)], at[static_cast<size_t>(idx) + 1]); };
  b.ids_dev = part(0);
  b.pos_dev = part(1);
  Tensor slots_dev = part(2), sel_dev = part(3), gather_dev = part(8), iota_dev = part(9);
  PagedAttentionRows pr;
  pr.q_offset = part(4);
  pr.q_count = part(5);
  pr.kv_len = part(6);
  pr.block_table = part(7).reshape({static_cast<int64_t>(paged.size()), max_blocks});
  pr.block_size = bs;
  pr.max_q_count = max_q;
  pr.max_kv_len = max_len;

  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, const Tensor& q3, const Tensor& k3, const Tensor& v3,
                           Tensor& o3) {
    Tensor& kp = pool.keys(layer);
    Tensor& vp = pool.values(layer);
    ops::kv_write(k3, slots_dev, kp);
    ops::kv_write(v3, slots_dev, vp);
    if (!paged.empty()) ops::paged_attention(q3, kp, vp, pr, p.args, o3);
    for (size_t k = 0; k < long_rows.size(); ++k) {
      const size_t r = long_rows[k];
      const int64_t a = b.offset[r], e = a + b.count[r], len = b.start[r] + b.count[r];
      Tensor kr = Tensor::empty({kp.dim(0), len, kp.dim(2)}, kp.dtype(), d.device);
      Tensor vr = Tensor::empty({vp.dim(0), len, vp.dim(2)}, vp.dtype(), d.device);
      const Tensor gs = gather_dev.slice_rows(gather_off[k], gather_off[k] + len);
      ops::kv_gather(kp, gs, kr);
      ops::kv_gather(vp, gs, vr);
      Tensor os = o3.slice_rows(a, e);
      ops::attention(q3.slice_rows(a, e), kr, vr, b.pos_dev.slice_rows(a, e), iota_dev.slice_rows(0, len), p.args, os);
    }
  };
  Tensor out = run_layers(d, b, sel_dev, static_cast<int64_t>(sel.size()), attend);
  if (sel.empty()) return;
  std::vector<float*> dst;
  bool any_argmax = false;
  for (const Model::PagedRow& r : rows) {
    if (!r.logits && !r.argmax) continue;
    dst.push_back(r.logits);
    any_argmax = any_argmax || r.argmax;
  }
  if (any_argmax) {
    Tensor am = Tensor::empty({out.dim(0)}, DType::I32, d.device);
    ops::argmax(out, am);
    std::vector<int32_t> host(static_cast<size_t>(out.dim(0)));
    backend(d.device).copy(host.data(), Device::kCPU, am.data(), d.device, am.nbytes());
    size_t k = 0;
    for (const Model::PagedRow& r : rows) {
      if (!r.logits && !r.argmax) continue;
      if (r.argmax) *r.argmax = host[k];
      ++k;
    }
  }
  if (std::any_of(dst.begin(), dst.end(), [](float* p) { return p != nullptr; })) copy_logits(d, out, dst);
}

}  // namespace mlxb
