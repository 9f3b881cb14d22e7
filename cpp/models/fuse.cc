// Fused projection weights (blocks.h: fuse_projections). One-token steps run q/k/v as one
// matrix-vector product and gate/up as another: fewer launches, and larger matrices that stream
// closer to the memory bandwidth. Longer inputs keep using the parts, now row views.
#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/fuse_quant.h"

namespace mlxb {

namespace {

bool adjacent(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset_bytes() + a.nbytes() == b.offset_bytes();
}

Linear fuse(const std::vector<Linear*>& parts) {
  const Linear& first = *parts[0];
  if (first.quantized()) return fuse_quantized(parts);
  if (!first.w.defined()) return Linear();
  const bool bias = first.bias.defined();
  int64_t total = 0;
  bool views = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Linear& p = *parts[i];
    if (!p.w.defined() || p.quantized() || p.w.dtype() != first.w.dtype() || p.in != first.in || !p.w.is_contiguous() ||
        p.w.device() != first.w.device() || p.bias.defined() != bias || (bias && p.bias.dtype() != first.bias.dtype()))
      return Linear();
    total = checked_add(total, p.out, "fused projection rows");
    if (i > 0) {
      views = views && adjacent(parts[i - 1]->w, p.w);
      if (bias) views = views && adjacent(parts[i - 1]->bias, p.bias);
    }
  }
  Linear f;
  f.out = total;
  f.in = first.in;
  if (views) {
    f.w = Tensor(first.w.storage(), first.w.offset_bytes(), first.w.dtype(), {total, first.in});
    if (bias) f.bias = Tensor(first.bias.storage(), first.bias.offset_bytes(), first.bias.dtype(), {total});
  } else {
    f.w = Tensor::empty({total, first.in}, first.w.dtype(), first.w.device());
    if (bias) f.bias = Tensor::empty({total}, first.bias.dtype(), first.bias.device());
    int64_t row = 0;
    for (const Linear* p : parts) {
      f.w.slice_rows(row, row + p->out).copy_from(p->w);
      if (bias) f.bias.slice_rows(row, row + p->out).copy_from(p->bias);
      row += p->out;
    }
  }
  int64_t row = 0;
  for (Linear* p : parts) {
    const int64_t n = p->out;
    *p = linear_rows(f, row, row + n);
    row += n;
  }
  return f;
}

}  // namespace

void fuse_projections(AttentionWeights& attn, MlpWeights& mlp) {
  attn.qkv = fuse({&attn.q, &attn.k, &attn.v});
  mlp.gate_up = fuse({&mlp.gate, &mlp.up});
}

}  // namespace mlxb
