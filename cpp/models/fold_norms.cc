// Folded RMSNorm weights (see fold_norms.h).
#include "models/fold_norms.h"

#include <cstdlib>
#include <cstring>

namespace mlxb {

bool fold_norms_requested() {
  const char* e = std::getenv("MLXB_FOLD_NORMS");
  return e && e[0] == '1';
}

std::string fold_norms_unsupported(const std::vector<LayerWeights>& layers, const DecoderSpec& spec, Device device, DType act) {
  if (device != Device::kCUDA) return "only CUDA models fold their norms";
  if (act != DType::BF16 && act != DType::F16) return "the activations are not 16-bit";
  if (spec.sandwich_norms || spec.norm_add_one || spec.qk_norm) return "the family's norms do not fold (sandwich, (1 + w) or q/k norms)";
  // Why a projection does not fold, or "" when it does.
  auto why = [act](const Linear& l) -> std::string {
    if (!l.w.defined()) return "unfused projections (no fused q/k/v or gate/up weight)";
    if (l.quantized()) return "quantized projections";
    if (l.bias.defined()) return "projection biases";
    if (l.w.dtype() != act) return std::string("weights in ") + dtype_name(l.w.dtype()) + ", activations in " + dtype_name(act);
    return "";
  };
  for (const LayerWeights& w : layers) {
    for (const Linear* l : {&w.attn.qkv, &w.mlp.gate_up, &w.attn.o, &w.mlp.down})
      if (std::string r = why(*l); !r.empty()) return "a layer has " + r;
    if (!w.input_norm.defined() || !w.post_attn_norm.defined()) return "a layer lacks its norm weights";
  }
  return "";
}

namespace {

// W [N, K] times diag(g): matmul(W, D) with D [K, K] = diag(g) gives W[n, k] * g[k]. diag_host is
// zero off the diagonal (fold_norms clears it once); only the diagonal is written here.
Linear fold(const Linear& l, const Tensor& g, Tensor& diag_host) {
  const int64_t k = l.in;
  const DType dt = l.w.dtype();
  Tensor gh = g.to(Device::kCPU);
  Tensor gc = Tensor::empty({k}, dt, Device::kCPU);
  gc.copy_from(gh);  // g in the weight's dtype (norm weights are stored in it)
  const size_t es = dtype_size(dt);
  for (int64_t i = 0; i < k; ++i)
    std::memcpy(static_cast<char*>(diag_host.data()) + static_cast<size_t>(i * k + i) * es, static_cast<const char*>(gc.data()) + i * es, es);
  Tensor diag = diag_host.to(l.w.device());
  Linear f;
  f.out = l.out;
  f.in = l.in;
  f.w = Tensor::empty({l.out, k}, dt, l.w.device());
  ops::matmul(l.w, diag, nullptr, f.w);
  return f;
}

}  // namespace

std::vector<FoldedLayer> fold_norms(const std::vector<LayerWeights>& layers) {
  std::vector<FoldedLayer> out;
  if (layers.empty()) return out;
  const Linear& first = layers[0].attn.qkv;
  Tensor diag_host = Tensor::empty({first.in, first.in}, first.w.dtype(), Device::kCPU);
  std::memset(diag_host.data(), 0, static_cast<size_t>(diag_host.nbytes()));
  out.reserve(layers.size());
  for (const LayerWeights& w : layers) {
    FoldedLayer f;
    f.qkv = fold(w.attn.qkv, w.input_norm, diag_host);
    f.gate_up = fold(w.mlp.gate_up, w.post_attn_norm, diag_host);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace mlxb
