// Batched forward of the shared decoder (see decoder_rows.h).
#include "models/decoder_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "models/rows_graph.h"
#include "models/step_profile.h"

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

// How run_layers computes a step (the CUDA paged paths; the defaults are the plain ops).
struct LayerPlan {
  // The attention callback rotates q and k itself (rope_kv_write); needs shared rope arguments.
  bool attend_ropes = false;
  // One q/k/v projection (q, k, v are row-strided column views of it; needs attend_ropes, no
  // q/k norms, and an attention that takes strided q) and one gate/up projection + activation.
  bool fuse = false;
};

// Attention of one layer for all rows: q3 [T, Hq, D], k3/v3 [T, Hkv, D] -> o3. `rope` non-null:
// q3/k3 are not rotated yet and the callback applies it (else they were rotated already).
using AttentionFn = std::function<void(int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3,
                                       Tensor& o3, const RopeArgs* rope)>;

// Embedding, every layer, and the final norm + LM head of the activation rows `sel` (host
// indices). Returns logits [sel.size(), vocab] in the activation dtype on the model's device.
Tensor run_layers(const DecoderParts& d, const Batch& b, const Tensor& sel_dev, int64_t n_sel, const AttentionFn& attend,
                  const LayerPlan& plan = LayerPlan()) {
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
      attend(i, p, q3, k3, v3, o3, rope);
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
  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                           const RopeArgs*) {
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

namespace {

void check_pool(const DecoderParts& d, const PagedKVPool& pool) {
  const PagedSpec& ps = pool.spec();
  if (ps.layers != d.cfg->num_layers || ps.kv_heads != d.cfg->num_kv_heads || ps.head_dim != d.cfg->head_dim ||
      ps.device != d.device)
    fail(ErrorCode::kInvalidArgument, "the KV pool does not match the model", "pool");
}

void check_blocks(const PagedSpec& ps, const Model::PagedRow& r) {
  const int64_t len = r.start + r.t;
  if (!r.blocks || static_cast<int64_t>(r.blocks->size()) * ps.block_size < len)
    fail(ErrorCode::kInternal, "paged row: block table does not cover position " + std::to_string(len - 1));
  for (int32_t blk : *r.blocks)
    if (blk < 0 || blk >= ps.num_blocks) fail(ErrorCode::kInternal, "paged row: block id outside the pool");
}

bool same_rope(const RopeArgs& a, const RopeArgs& c) {
  return a.inv_freq.defined() == c.inv_freq.defined() && (!a.inv_freq.defined() || a.inv_freq.data() == c.inv_freq.data()) &&
         a.mscale == c.mscale;
}

// Hands each sampled row its argmax and/or logits from the step's device outputs (rows in plan
// order; `out` row k belongs to the k-th row that asked for something).
void deliver(const DecoderParts& d, const std::vector<Model::PagedRow>& rows, const Tensor& out, const Tensor* next) {
  std::vector<float*> dst;
  bool any_argmax = false, any_logits = false;
  for (const Model::PagedRow& r : rows) {
    if (!r.logits && !r.argmax) continue;
    dst.push_back(r.logits);
    any_argmax = any_argmax || r.argmax;
    any_logits = any_logits || r.logits;
  }
  if (dst.empty()) return;
  if (any_argmax) {
    Tensor am;
    if (next) {
      am = *next;
    } else {
      am = Tensor::empty({out.dim(0)}, DType::I32, d.device);
      ops::argmax(out, am);
    }
    std::vector<int32_t> host(dst.size());
    backend(d.device).copy(host.data(), Device::kCPU, am.data(), d.device, static_cast<int64_t>(host.size() * sizeof(int32_t)));
    size_t k = 0;
    for (const Model::PagedRow& r : rows) {
      if (!r.logits && !r.argmax) continue;
      if (r.argmax) *r.argmax = host[k];
      ++k;
    }
  }
  if (any_logits) copy_logits(d, out.slice_rows(0, static_cast<int64_t>(dst.size())), dst);
}

// A step where every row decodes one token and samples it, on CUDA with rope arguments shared by
// all rows: padded to a row bucket and replayed from a recorded graph (rows_graph.h), or run
// eagerly in the same padded form when not recorded (yet). False: the step does not qualify.
bool paged_decode_step(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows) {
  if (!d.row_graphs || d.device == Device::kCPU || StepProfile::get().level() >= 2) return false;
  const PagedSpec& ps = pool.spec();
  const int64_t bs = ps.block_size, n = static_cast<int64_t>(rows.size());
  int64_t max_len = 1;
  for (const Model::PagedRow& r : rows) {
    if (r.t != 1 || (!r.logits && !r.argmax)) return false;
    max_len = std::max(max_len, r.start + 1);
  }
  if (!d.rope_global->fixed(max_len) || (d.rope_local && !d.rope_local->fixed(max_len))) return false;
  const RopeArgs full = d.rope_global->args(max_len);
  const RopeArgs local = d.rope_local ? d.rope_local->args(max_len) : RopeArgs();
  for (const Model::PagedRow& r : rows) {
    if (!same_rope(d.rope_global->args(r.start + 1), full)) return false;
    if (d.rope_local && !same_rope(d.rope_local->args(r.start + 1), local)) return false;
  }
  const auto t0 = StepProfile::Clock::now();
  for (const Model::PagedRow& r : rows) {
    check_row(d, r.ids, r.t, r.start);
    check_blocks(ps, r);
  }
  const int64_t rb = RowGraphs::rows_bucket(n), width = RowGraphs::width_bucket((max_len + bs - 1) / bs);
  std::vector<int32_t> host(static_cast<size_t>(RowGraphs::size(rb, width)), 0);
  auto at = [&](RowGraphs::Section s, int64_t i) -> int32_t& {
    return host[static_cast<size_t>(RowGraphs::offset(s, rb) + i)];
  };
  for (int64_t i = 0; i < rb; ++i) {
    at(RowGraphs::kSel, i) = static_cast<int32_t>(i);
    at(RowGraphs::kQOffset, i) = static_cast<int32_t>(i);
    at(RowGraphs::kQCount, i) = 1;
    at(RowGraphs::kKvLen, i) = 1;   // padding rows: position 0, one key (slot 0 of block 0), no KV write
    at(RowGraphs::kSlots, i) = -1;
  }
  for (int64_t i = 0; i < n; ++i) {
    const Model::PagedRow& r = rows[static_cast<size_t>(i)];
    const std::vector<int32_t>& bl = *r.blocks;
    at(RowGraphs::kIds, i) = r.ids[0];
    at(RowGraphs::kPos, i) = static_cast<int32_t>(r.start);
    at(RowGraphs::kSlots, i) = static_cast<int32_t>(bl[static_cast<size_t>(r.start / bs)] * bs + r.start % bs);
    at(RowGraphs::kKvLen, i) = static_cast<int32_t>(r.start + 1);
    const int64_t need = (r.start + bs) / bs;
    std::copy(bl.begin(), bl.begin() + need, host.begin() + RowGraphs::offset(RowGraphs::kTable, rb) + i * width);
  }
  RowGraphs::Body body = [&](const RowGraphs::Inputs& in) {
    Batch b;
    b.total = rb;
    b.offset.assign(1, 0);
    b.count.assign(1, rb);
    b.full.assign(1, full);
    b.local.assign(1, local);
    b.ids_dev = in.ids;
    b.pos_dev = in.pos;
    PagedAttentionRows pr;
    pr.q_offset = in.q_offset;
    pr.q_count = in.q_count;
    pr.kv_len = in.kv_len;
    pr.block_table = in.table;
    pr.block_size = bs;
    pr.max_q_count = 1;
    pr.max_kv_len = width * bs;
    AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                             const RopeArgs* rope) {
      Tensor& kp = pool.keys(layer);
      Tensor& vp = pool.values(layer);
      ops::rope_kv_write(q3, k3, v3, b.pos_dev, *rope, in.slots, kp, vp);
      ops::paged_attention(q3, kp, vp, pr, p.args, o3);
    };
    LayerPlan plan;
    plan.attend_ropes = true;
    plan.fuse = true;
    RowGraphs::Outputs o;
    o.logits = run_layers(d, b, in.sel, rb, attend, plan);
    o.next = Tensor::empty({rb}, DType::I32, d.device);
    ops::argmax(o.logits, o.next);
    return o;
  };
  // What the recorded kernels captured beyond the input buffer: shapes, mode, rope tables and
  // every layer's pool buffers (a graph stays valid only while all of them are the same).
  std::vector<uint64_t> key = {static_cast<uint64_t>(rb), static_cast<uint64_t>(width), d.batch_invariant ? 1u : 0u,
                               static_cast<uint64_t>(ps.num_blocks),
                               full.inv_freq.defined() ? reinterpret_cast<uintptr_t>(full.inv_freq.data()) : 0,
                               local.inv_freq.defined() ? reinterpret_cast<uintptr_t>(local.inv_freq.data()) : 0};
  for (int64_t l = 0; l < ps.layers; ++l) {
    key.push_back(reinterpret_cast<uintptr_t>(pool.keys(l).data()));
    key.push_back(reinterpret_cast<uintptr_t>(pool.values(l).data()));
  }
  uint32_t bits[2];
  std::memcpy(&bits[0], &full.mscale, sizeof(float));
  std::memcpy(&bits[1], &local.mscale, sizeof(float));
  key.push_back(bits[0]);
  key.push_back(bits[1]);
  const auto t1 = StepProfile::Clock::now();
  const RowGraphs::Outputs* res = d.row_graphs->run(key, rb, width, host, body);
  const bool replayed = res != nullptr;
  RowGraphs::Outputs eager;
  if (!res) {
    Tensor buf = upload_i32(host, d.device);
    eager = body(RowGraphs::views(buf, rb, width));
    res = &eager;
  }
  const auto t2 = StepProfile::Clock::now();
  deliver(d, rows, res->logits, &res->next);
  StepProfile::get().step(n, replayed, t0, t1, t2, StepProfile::Clock::now());
  return true;
}

}  // namespace

void decoder_forward_paged(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows) {
  if (rows.empty()) return;
  check_pool(d, pool);
  if (paged_decode_step(d, pool, rows)) return;
  const auto t0 = StepProfile::Clock::now();
  StepProfile& prof = StepProfile::get();
  const PagedSpec& ps = pool.spec();
  const int64_t bs = ps.block_size;
  const bool cuda = d.device != Device::kCPU;
  const bool cuda_fast = cuda && !d.batch_invariant;
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
    check_blocks(ps, r);
    const int64_t len = r.start + r.t;
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

  const auto t1 = StepProfile::Clock::now();
  prof.begin(d.device);
  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                           const RopeArgs* rope) {
    Tensor& kp = pool.keys(layer);
    Tensor& vp = pool.values(layer);
    if (rope) {
      ops::rope_kv_write(q3, k3, v3, b.pos_dev, *rope, slots_dev, kp, vp);
    } else {
      ops::kv_write(k3, slots_dev, kp);
      ops::kv_write(v3, slots_dev, vp);
    }
    prof.mark(StepProfile::kRopeKv);
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
    prof.mark(StepProfile::kAttn);
  };
  // On CUDA: rope + KV write in one launch when all rows share rope arguments, and the fused
  // projections when every row goes through paged_attention (it takes row-strided q).
  LayerPlan plan;
  plan.attend_ropes = cuda && b.shared_rope;
  plan.fuse = plan.attend_ropes && long_rows.empty();
  Tensor out = run_layers(d, b, sel_dev, static_cast<int64_t>(sel.size()), attend, plan);
  prof.mark(StepProfile::kHead);
  const auto t2 = StepProfile::Clock::now();
  if (!sel.empty()) deliver(d, rows, out, nullptr);
  prof.step(static_cast<int64_t>(rows.size()), false, t0, t1, t2, StepProfile::Clock::now());
}

}  // namespace mlxb
