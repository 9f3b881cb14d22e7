// One-token decoder layers with fused projections (see decode_fused.h).
#include "models/decode_fused.h"

#include <cstdlib>
#include <cstring>

namespace mlxb {

bool fused_decode_supported(const std::vector<LayerWeights>& layers, const DecoderSpec& spec, Device device, DType act) {
  const char* env = std::getenv("MLXB_CUDA_FUSED");
  if (env && std::strcmp(env, "0") == 0) return false;
  if (device != Device::kCUDA || (act != DType::BF16 && act != DType::F16) || spec.sandwich_norms || layers.empty()) return false;
  auto covered = [](const Linear& l) { return l.w.defined() || l.quantized(); };
  for (const LayerWeights& w : layers) {
    if (!covered(w.attn.qkv) || !covered(w.attn.o) || !covered(w.mlp.gate_up) || !covered(w.mlp.down)) return false;
    if (w.attn.q_norm.defined() || w.attn.k_norm.defined() || !w.input_norm.defined() || !w.post_attn_norm.defined()) return false;
  }
  return true;
}

namespace {

const Tensor* bias_of(const Linear& l) { return l.bias.defined() ? &l.bias : nullptr; }

// resid += x·w^T, dense or quantized.
void project_add(const Tensor& x, const Linear& l, Tensor& resid) {
  if (l.quantized()) ops::qmatmul_add(x, l.q, bias_of(l), resid);
  else ops::matmul_add(x, l.w, bias_of(l), resid);
}

}  // namespace

void fused_decode_layers(Tensor& x, const std::vector<LayerWeights>& layers, const std::vector<AttentionParams>& params,
                         CacheSet& caches, const StepInputs& step, float norm_eps, bool norm_add_one, Activation act) {
  if (step.t != 1) fail(ErrorCode::kInternal, "fused decode layers take one token");
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& w = layers[i];
    const AttentionParams& p = params[i];
    LayerCache& cache = *caches[i];
    const int64_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
    const QkvShape shape{p.heads, p.kv_heads, p.head_dim};
    const RopeArgs& rope = p.local_rope ? step.rope_local : step.rope_full;
    Tensor qkv = Tensor::empty({1, qd + 2 * kvd}, step.act, step.device);
    Tensor flat = qkv.reshape({qd + 2 * kvd});
    Tensor q3 = flat.slice_rows(0, qd).reshape({1, p.heads, p.head_dim});
    Tensor o = Tensor::empty({1, p.heads, p.head_dim}, step.act, step.device);
    const NormArgs in_norm{w.input_norm, norm_eps, norm_add_one};
    if (w.attn.qkv.quantized()) {  // the projection, then rope, cache writes and attention as attention_block's
      ops::norm_qmatmul(x, in_norm, w.attn.qkv.q, bias_of(w.attn.qkv), qkv);
      Tensor k3 = flat.slice_rows(qd, qd + kvd).reshape({1, p.kv_heads, p.head_dim});
      Tensor v3 = flat.slice_rows(qd + kvd, qd + 2 * kvd).reshape({1, p.kv_heads, p.head_dim});
      Tensor qk = flat.slice_rows(0, qd + kvd).reshape({1, p.heads + p.kv_heads, p.head_dim});
      attend(q3, k3, v3, qk, rope, p, cache, step, o);
    } else if (step.captured) {  // k/v go straight into the cache buffers at this step's slot (read at replay)
      LayerCache::DeviceLayout lay;
      if (!cache.device_layout(1, lay)) fail(ErrorCode::kInternal, "a captured decode step met a cache without a device layout");
      const CapturedStep& c = *step.captured;
      ops::norm_qkv_rope(x, in_norm, w.attn.qkv.w, bias_of(w.attn.qkv), shape, step.pos_dev, rope, lay.ring ? c.ring_slot : c.slot,
                         lay.k, lay.v, qkv);
      AttentionArgs args = p.args;
      args.kv_len = lay.ring ? c.ring_len : c.len;
      args.fresh_slot = lay.ring ? c.ring_slot : c.slot;
      ops::attention(q3, lay.k, lay.v, step.pos_dev, lay.ring ? c.ring_pos : lay.pos, args, o);
    } else {
      Tensor none;
      ops::norm_qkv_rope(x, in_norm, w.attn.qkv.w, bias_of(w.attn.qkv), shape, step.pos_dev, rope, none, none, none, qkv);
      Tensor k3 = flat.slice_rows(qd, qd + kvd).reshape({1, p.kv_heads, p.head_dim});
      Tensor v3 = flat.slice_rows(qd + kvd, qd + 2 * kvd).reshape({1, p.kv_heads, p.head_dim});
      const KVView kv = cache.update(k3, v3, step.pos.data(), 1);
      ops::attention(q3, kv.k, kv.v, step.pos_dev, kv.pos, p.args, o);
    }
    project_add(o.reshape({1, qd}), w.attn.o, x);
    Tensor h = Tensor::empty({1, w.mlp.gate_up.out / 2}, step.act, step.device);
    const NormArgs post_norm{w.post_attn_norm, norm_eps, norm_add_one};
    if (w.mlp.gate_up.quantized()) ops::norm_qgated_matmul(x, post_norm, w.mlp.gate_up.q, bias_of(w.mlp.gate_up), act, h);
    else ops::norm_gated_matmul(x, post_norm, w.mlp.gate_up.w, bias_of(w.mlp.gate_up), act, h);
    project_add(h, w.mlp.down, x);
  }
}

}  // namespace mlxb
