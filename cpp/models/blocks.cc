// Attention and MLP blocks (see blocks.h).
#include "models/blocks.h"

namespace mlxb {

namespace {

// Columns [begin, end) of a one-row activation [1, n] as a contiguous [1, end - begin] view.
Tensor row_cols(const Tensor& x, int64_t begin, int64_t end) {
  return x.reshape({x.numel()}).slice_rows(begin, end).reshape({1, end - begin});
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
  ops::attention(q3, kb, vb, step.pos_dev, lay.ring ? c.ring_pos : lay.pos, args, o);
}

}  // namespace

void attention_block(const Tensor& x, const AttentionWeights& w, const AttentionParams& p, LayerCache& cache,
                     const StepInputs& step, Tensor& out) {
  const int64_t t = step.t;
  const int64_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
  Tensor q, k, v, qk;  // qk: q and k heads adjacent in one view (one-row fused projection)
  if (t == 1 && (w.qkv.w.defined() || w.qkv.quantized())) {
    Tensor qkv = Tensor::empty({1, qd + 2 * kvd}, step.act, step.device);
    linear(x, w.qkv, qkv);
    q = row_cols(qkv, 0, qd);
    k = row_cols(qkv, qd, qd + kvd);
    v = row_cols(qkv, qd + kvd, qd + 2 * kvd);
    qk = row_cols(qkv, 0, qd + kvd).reshape({1, p.heads + p.kv_heads, p.head_dim});
  } else {
    q = Tensor::empty({t, qd}, step.act, step.device);
    k = Tensor::empty({t, kvd}, step.act, step.device);
    v = Tensor::empty({t, kvd}, step.act, step.device);
    linear(x, w.q, q);
    linear(x, w.k, k);
    linear(x, w.v, v);
  }
  Tensor q3 = q.reshape({t, p.heads, p.head_dim});
  Tensor k3 = k.reshape({t, p.kv_heads, p.head_dim});
  Tensor v3 = v.reshape({t, p.kv_heads, p.head_dim});
  if (w.q_norm.defined()) ops::rms_norm(q3, w.q_norm, p.norm_eps, p.norm_add_one, q3);
  if (w.k_norm.defined()) ops::rms_norm(k3, w.k_norm, p.norm_eps, p.norm_add_one, k3);
  const RopeArgs& rope = p.local_rope ? step.rope_local : step.rope_full;
  Tensor o = Tensor::empty({t, p.heads, p.head_dim}, step.act, step.device);
  if (step.captured) {
    captured_attention(q3, k3, v3, rope, p, cache, step, o);
  } else {
    if (qk.defined()) {
      ops::rope(qk, step.pos_dev, rope);  // one launch for the q and k heads of the token
    } else {
      ops::rope(q3, step.pos_dev, rope);
      ops::rope(k3, step.pos_dev, rope);
    }
    const KVView kv = cache.update(k3, v3, step.pos.data(), t);
    ops::attention(q3, kv.k, kv.v, step.pos_dev, kv.pos, p.args, o);
  }
  linear(o.reshape({t, qd}), w.o, out);
}

void mlp_block(const Tensor& x, const MlpWeights& w, Activation act, const StepInputs& step, Tensor& out) {
  const int64_t t = step.t, f = w.gate.out;
  if (t == 1 && w.gate_up.w.defined()) {  // fused dense [gate; up]: one launch for both and the activation
    Tensor h = Tensor::empty({1, f}, step.act, step.device);
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
