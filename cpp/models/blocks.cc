// Attention and MLP blocks (see blocks.h).
#include "models/blocks.h"

#include <cstdlib>

namespace mlxb {

namespace {

// Columns [begin, end) of a one-row activation [1, n] as a contiguous [1, end - begin] view.
Tensor row_cols(const Tensor& x, int64_t begin, int64_t end) {
  return x.reshape({x.numel()}).slice_rows(begin, end).reshape({1, end - begin});
}

// MLXB_CUDA_PREFILL_FUSED=0: prompt chunks on CUDA take the unfused ops (separate q/k/v and gate/up
// GEMMs, rope, update()), for comparisons.
bool fused_prefill_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("MLXB_CUDA_PREFILL_FUSED");
    return !(e && e[0] == '0');
  }();
  return on;
}

// Rotates q/k of a recorded decode step, writes k/v into the cache buffers (one launch) and attends
// over them; every value that changes between replays is read from device memory (CapturedStep).
void captured_attention(Tensor& q3, Tensor& k3, const Tensor& v3, const RopeArgs& rope, const AttentionParams& p,
                        LayerCache& cache, const StepInputs& step, Tensor& o) {
  LayerCache::DeviceLayout lay;
  if (!cache.device_layout(step.t, lay)) fail(ErrorCode::kInternal, "a captured decode step met a cache without a device layout");
  const CapturedStep& c = *step.captured;
  Tensor kb = lay.k, vb = lay.v;
  ops::rope_kv_write(q3, k3, v3, step.pos_dev, rope, lay.ring ? c.ring_slot : c.slot, kb, vb);
  AttentionArgs args = p.args;
  args.kv_len = lay.ring ? c.ring_len : c.len;
  args.fresh_slot = lay.ring ? c.ring_slot : c.slot;
  ops::attention(q3, kb, vb, step.pos_dev, lay.ring ? c.ring_pos : lay.pos, args, o);
}

// A prompt chunk (t > 1) on CUDA into a contiguous cache (slot = position) gets its buffers here
// (grown to fit; nothing else changes): rope and both cache writes then run as one launch and
// attention reads the buffers (prefill_attention), as update() + attention would give. False for
// other caches, and for sliding layers (their caches may rotate): those use update().
bool prefill_layout(const AttentionParams& p, const RopeArgs& rope, LayerCache& cache, const StepInputs& step,
                    LayerCache::DeviceLayout& lay) {
  if (!fused_prefill_enabled() || step.device != Device::kCUDA || step.t < 2 || step.captured || p.args.window > 0 || !rope.inv_freq.defined()) return false;
  return cache.device_layout(step.t, lay) && !lay.ring && lay.pos.defined();
}

void prefill_attention(Tensor& q3, Tensor& k3, const Tensor& v3, const RopeArgs& rope, const AttentionParams& p,
                       const LayerCache::DeviceLayout& lay, LayerCache& cache, const StepInputs& step, Tensor& o) {
  Tensor kb = lay.k, vb = lay.v;
  ops::rope_kv_write(q3, k3, v3, step.pos_dev, rope, step.pos_dev, kb, vb);
  cache.commit(step.pos.data(), step.t);
  const int64_t len = cache.length(), cap = lay.capacity, d = p.head_dim;
  const Tensor k = kb.as_strided({p.kv_heads, len, d}, {cap * d, d, 1}, 0);
  const Tensor v = vb.as_strided({p.kv_heads, len, d}, {cap * d, d, 1}, 0);
  ops::attention(q3, k, v, step.pos_dev, lay.pos.slice_rows(0, len), p.args, o);
}

}  // namespace

void attention_block(const Tensor& x, const AttentionWeights& w, const AttentionParams& p, LayerCache& cache,
                     const StepInputs& step, Tensor& out) {
  const int64_t t = step.t;
  const int64_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
  const RopeArgs& rope = p.local_rope ? step.rope_local : step.rope_full;
  LayerCache::DeviceLayout lay;
  const bool direct = prefill_layout(p, rope, cache, step, lay);
  Tensor q3, k3, v3, qk;  // qk: q and k heads adjacent in one view (one-row fused projection)
  if (t == 1 && (w.qkv.w.defined() || w.qkv.quantized())) {
    Tensor qkv = Tensor::empty({1, qd + 2 * kvd}, step.act, step.device);
    linear(x, w.qkv, qkv);
    q3 = row_cols(qkv, 0, qd).reshape({1, p.heads, p.head_dim});
    k3 = row_cols(qkv, qd, qd + kvd).reshape({1, p.kv_heads, p.head_dim});
    v3 = row_cols(qkv, qd + kvd, qd + 2 * kvd).reshape({1, p.kv_heads, p.head_dim});
    qk = row_cols(qkv, 0, qd + kvd).reshape({1, p.heads + p.kv_heads, p.head_dim});
  } else if (direct && w.qkv.w.defined() && !w.q_norm.defined() && !w.k_norm.defined()) {
    // Prompt chunk on CUDA: one q/k/v GEMM; q, k and v stay row-strided column views of it, which
    // rope_kv_write and the CUDA attention read in place.
    const int64_t width = qd + 2 * kvd;
    Tensor qkv = Tensor::empty({t, width}, step.act, step.device);
    linear(x, w.qkv, qkv);
    q3 = qkv.as_strided({t, p.heads, p.head_dim}, {width, p.head_dim, 1}, 0);
    k3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd);
    v3 = qkv.as_strided({t, p.kv_heads, p.head_dim}, {width, p.head_dim, 1}, qd + kvd);
  } else {
    Tensor q = Tensor::empty({t, qd}, step.act, step.device);
    Tensor k = Tensor::empty({t, kvd}, step.act, step.device);
    Tensor v = Tensor::empty({t, kvd}, step.act, step.device);
    linear(x, w.q, q);
    linear(x, w.k, k);
    linear(x, w.v, v);
    q3 = q.reshape({t, p.heads, p.head_dim});
    k3 = k.reshape({t, p.kv_heads, p.head_dim});
    v3 = v.reshape({t, p.kv_heads, p.head_dim});
  }
  if (w.q_norm.defined()) ops::rms_norm(q3, w.q_norm, p.norm_eps, p.norm_add_one, q3);
  if (w.k_norm.defined()) ops::rms_norm(k3, w.k_norm, p.norm_eps, p.norm_add_one, k3);
  Tensor o = Tensor::empty({t, p.heads, p.head_dim}, step.act, step.device);
  if (direct) prefill_attention(q3, k3, v3, rope, p, lay, cache, step, o);
  else attend(q3, k3, v3, qk, rope, p, cache, step, o);
  linear(o.reshape({t, qd}), w.o, out);
}

void attend(Tensor& q3, Tensor& k3, const Tensor& v3, Tensor qk, const RopeArgs& rope, const AttentionParams& p,
            LayerCache& cache, const StepInputs& step, Tensor& o) {
  if (step.captured) {
    captured_attention(q3, k3, v3, rope, p, cache, step, o);
    return;
  }
  if (qk.defined()) {
    ops::rope(qk, step.pos_dev, rope);  // one launch for the q and k heads of the token
  } else {
    ops::rope(q3, step.pos_dev, rope);
    ops::rope(k3, step.pos_dev, rope);
  }
  const KVView kv = cache.update(k3, v3, step.pos.data(), step.t);
  ops::attention(q3, kv.k, kv.v, step.pos_dev, kv.pos, p.args, o);
}

void mlp_block(const Tensor& x, const MlpWeights& w, Activation act, const StepInputs& step, Tensor& out) {
  const int64_t t = step.t, f = w.gate.out;
  // Fused dense [gate; up]: one launch for both and the activation (one row), or one GEMM and the
  // activation over its halves (a prompt chunk on CUDA).
  if ((t == 1 || (step.device == Device::kCUDA && fused_prefill_enabled())) && w.gate_up.w.defined()) {
    Tensor h = Tensor::empty({t, f}, step.act, step.device);
    ops::gated_matmul(x, w.gate_up.w, w.gate_up.bias.defined() ? &w.gate_up.bias : nullptr, act, h);
    linear(h, w.down, out);
    return;
  }
  if (t == 1 && w.gate_up.quantized()) {  // fused quantized [gate; up]: likewise (qgated_matmul)
    Tensor h = Tensor::empty({1, f}, step.act, step.device);
    ops::qgated_matmul(x, w.gate_up.q, w.gate_up.bias.defined() ? &w.gate_up.bias : nullptr, act, h);
    linear(h, w.down, out);
    return;
  }
  Tensor gate = Tensor::empty({t, f}, step.act, step.device);
  Tensor up = Tensor::empty({t, f}, step.act, step.device);
  linear(x, w.gate, gate);
  linear(x, w.up, up);
  ops::gated_act(gate, up, act, gate);
  linear(gate, w.down, out);
}

}  // namespace mlxb
