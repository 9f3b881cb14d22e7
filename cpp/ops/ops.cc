// Dispatch of the op API to the backend owning the output tensor.
#include "ops/ops.h"

namespace mlxb::ops {

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) { backend(y.device()).matmul(x, w, bias, y); }
Tensor prepare_weight(const Tensor& w) { return w.defined() ? backend(w.device()).prepare_weight(w) : w; }
QuantWeight prepare_qweight(const QuantWeight& w) { return w.packed.defined() ? backend(w.packed.device()).prepare_qweight(w) : w; }
Tensor prepared_rows(const Tensor& prepared, int64_t r0, int64_t r1) { return backend(prepared.device()).prepared_rows(prepared, r0, r1); }
void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) { backend(out.device()).embedding(table, ids, scale, out); }
void qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) { backend(y.device()).qmatmul(x, w, bias, y); }
void qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out) { backend(out.device()).qembedding(table, ids, scale, out); }
void rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y) { backend(y.device()).rms_norm(x, w, eps, add_one, y); }
void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) { backend(y.device()).layer_norm(x, w, b, eps, y); }
void rope(Tensor& x, const Tensor& positions, const RopeArgs& args) { backend(x.device()).rope(x, positions, args); }
void softmax(const Tensor& x, Tensor& y) { backend(y.device()).softmax(x, y); }
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
               const AttentionArgs& args, Tensor& out) { backend(out.device()).attention(q, k, v, q_pos, k_pos, args, out); }
void gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) { backend(out.device()).gated_act(gate, up, act, out); }
void add(const Tensor& a, const Tensor& b, Tensor& out) { backend(out.device()).add(a, b, out); }
void softcap(Tensor& x, float cap) { backend(x.device()).softcap(x, cap); }
void kv_write(const Tensor& src, const Tensor& slots, Tensor& cache) { backend(cache.device()).kv_write(src, slots, cache); }
void convert(const Tensor& src, Tensor& dst) { backend(dst.device()).convert(src, dst); }
void kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out) { backend(out.device()).kv_gather(cache, slots, out); }
void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                     const AttentionArgs& args, Tensor& out) { backend(out.device()).paged_attention(q, k, v, rows, args, out); }
void add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y) {
  backend(y.device()).add_rms_norm(x, branch, w, eps, add_one, y);
}
void argmax(const Tensor& x, Tensor& out) { backend(x.device()).argmax(x, out); }
void sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out) { backend(logits.device()).sample(logits, rows, out); }
void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args, const Tensor& slots,
                   Tensor& k_cache, Tensor& v_cache) {
  backend(k_cache.device()).rope_kv_write(q, k, v, positions, args, slots, k_cache, v_cache);
}
void rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope, const Tensor& slots,
                          Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows, const AttentionArgs& args, Tensor& out) {
  backend(out.device()).rope_paged_attention(q, k, v, positions, rope, slots, k_cache, v_cache, rows, args, out);
}
void gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) {
  backend(out.device()).gated_matmul(x, w, bias, act, out);
}
void matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid) {
  backend(resid.device()).matmul_add(x, w, bias, resid);
}
void norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y) {
  backend(y.device()).norm_matmul(x, norm, w, bias, y);
}
void norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) {
  backend(out.device()).norm_gated_matmul(x, norm, w, bias, act, out);
}
void norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                   const Tensor& positions, const RopeArgs& rope, const Tensor& slots, Tensor& k_cache, Tensor& v_cache, Tensor& qkv) {
  backend(qkv.device()).norm_qkv_rope(x, norm, w, bias, shape, positions, rope, slots, k_cache, v_cache, qkv);
}

void qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out) {
  backend(out.device()).qgated_matmul(x, w, bias, act, out);
}
void qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid) {
  backend(resid.device()).qmatmul_add(x, w, bias, resid);
}
void norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  backend(y.device()).norm_qmatmul(x, norm, w, bias, y);
}
void norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out) {
  backend(out.device()).norm_qgated_matmul(x, norm, w, bias, act, out);
}

void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid) { backend(resid.device()).matmul_accumulate(x, w, resid); }
void rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                              const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) {
  backend(k_cache.device()).rms_scaled_rope_kv_write(q, k, v, x, eps, positions, args, slots, k_cache, v_cache);
}
void rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out) {
  backend(out.device()).rms_scaled_gated_act(h, x, eps, act, out);
}

}  // namespace mlxb::ops
