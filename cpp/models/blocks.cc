// Attention and MLP blocks (see blocks.h).
#include "models/blocks.h"

namespace mlxb {

void attention_block(const Tensor& x, const AttentionWeights& w, const AttentionParams& p, LayerCache& cache,
                     const StepInputs& step, Tensor& out) {
  const int64_t t = step.t;
  Tensor q = Tensor::empty({t, p.heads * p.head_dim}, step.act, step.device);
  Tensor k = Tensor::empty({t, p.kv_heads * p.head_dim}, step.act, step.device);
  Tensor v = Tensor::empty({t, p.kv_heads * p.head_dim}, step.act, step.device);
  linear(x, w.q, q);
  linear(x, w.k, k);
  linear(x, w.v, v);
  Tensor q3 = q.reshape({t, p.heads, p.head_dim});
  Tensor k3 = k.reshape({t, p.kv_heads, p.head_dim});
  Tensor v3 = v.reshape({t, p.kv_heads, p.head_dim});
  if (w.q_norm.defined()) ops::rms_norm(q3, w.q_norm, p.norm_eps, p.norm_add_one, q3);
  if (w.k_norm.defined()) ops::rms_norm(k3, w.k_norm, p.norm_eps, p.norm_add_one, k3);
  const RopeArgs& rope = p.local_rope ? step.rope_local : step.rope_full;
  ops::rope(q3, step.pos_dev, rope);
  ops::rope(k3, step.pos_dev, rope);
  const KVView kv = cache.update(k3, v3, step.pos.data(), t);
  Tensor o = Tensor::empty({t, p.heads, p.head_dim}, step.act, step.device);
  ops::attention(q3, kv.k, kv.v, step.pos_dev, kv.pos, p.args, o);
  linear(o.reshape({t, p.heads * p.head_dim}), w.o, out);
}

void mlp_block(const Tensor& x, const MlpWeights& w, Activation act, const StepInputs& step, Tensor& out) {
  const int64_t t = step.t, f = w.gate.out;
  Tensor gate = Tensor::empty({t, f}, step.act, step.device);
  Tensor up = Tensor::empty({t, f}, step.act, step.device);
  linear(x, w.gate, gate);
  linear(x, w.up, up);
  ops::gated_act(gate, up, act, gate);
  linear(gate, w.down, out);
}

}  // namespace mlxb
