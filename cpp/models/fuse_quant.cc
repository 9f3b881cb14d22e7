// Quantized projection fusion (see fuse_quant.h).
#include "models/fuse_quant.h"

#include <string>

#include "quant/affine.h"

namespace mlxb {

namespace {

bool fusable(const Linear& a, const Linear& b) {
  const QuantWeight& x = a.q;
  const QuantWeight& y = b.q;
  return b.quantized() && x.bits == y.bits && x.group_size == y.group_size && a.in == b.in && x.cols == y.cols &&
         x.scales.dtype() == y.scales.dtype() && x.packed.device() == y.packed.device() && x.packed.is_contiguous() &&
         y.packed.is_contiguous() && x.scales.is_contiguous() && y.scales.is_contiguous() && x.biases.is_contiguous() &&
         y.biases.is_contiguous() && a.bias.defined() == b.bias.defined() && (!a.bias.defined() || a.bias.dtype() == b.bias.dtype());
}

// Rows of the parts' tensors (selected by `pick`) stacked into one new tensor.
template <typename Pick>
Tensor stack_rows(const std::vector<Linear*>& parts, int64_t total, Pick pick) {
  const Tensor& first = pick(*parts[0]);
  Shape shape = first.shape();
  shape[0] = total;
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  int64_t row = 0;
  for (const Linear* p : parts) {
    const Tensor& t = pick(*p);
    out.slice_rows(row, row + t.dim(0)).copy_from(t);
    row += t.dim(0);
  }
  return out;
}

}  // namespace

Linear fuse_quantized(const std::vector<Linear*>& parts) {
  if (parts.empty() || !parts[0]->quantized()) return Linear();
  const Linear& first = *parts[0];
  int64_t total = 0;
  for (const Linear* p : parts) {
    if (!fusable(first, *p)) return Linear();
    total = checked_add(total, p->out, "fused projection rows");
  }
  Linear f;
  f.out = total;
  f.in = first.in;
  f.q.bits = first.q.bits;
  f.q.group_size = first.q.group_size;
  f.q.rows = total;
  f.q.cols = first.q.cols;
  f.q.packed = stack_rows(parts, total, [](const Linear& l) -> const Tensor& { return l.q.packed; });
  f.q.scales = stack_rows(parts, total, [](const Linear& l) -> const Tensor& { return l.q.scales; });
  f.q.biases = stack_rows(parts, total, [](const Linear& l) -> const Tensor& { return l.q.biases; });
  if (first.bias.defined()) f.bias = stack_rows(parts, total, [](const Linear& l) -> const Tensor& { return l.bias; });
  quant::validate(f.q, "fused projection");
  int64_t row = 0;
  for (Linear* p : parts) {
    const int64_t n = p->out;
    *p = linear_rows(f, row, row + n);
    row += n;
  }
  return f;
}

}  // namespace mlxb
