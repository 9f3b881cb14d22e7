// WeightLoader and the Linear helpers (see weights.h).
#include "models/weights.h"

#include <algorithm>
#include <optional>
#include <string>

#include "quant/affine.h"

namespace mlxb {

WeightLoader::WeightLoader(const WeightStore& store, const ModelConfig& cfg, const LoadOptions& options, bool dry_run)
    : store_(store), cfg_(cfg), device_(options.device), dtype_(options.dtype), auto_dtype_(options.auto_dtype),
      dry_run_(dry_run), progress_(dry_run ? std::function<void(double, const char*)>() : options.progress), total_(std::max<int64_t>(1, store.total_bytes())) {
  if (!auto_dtype_ && dtype_ != DType::F32 && dtype_ != DType::BF16 && dtype_ != DType::F16)
    fail(ErrorCode::kInvalidArgument, std::string("dtype must be float32, bfloat16 or float16, got ") + dtype_name(dtype_),
         "dtype");
}

DType WeightLoader::weight_dtype(DType file) const { return auto_dtype_ ? file : dtype_; }

void WeightLoader::account(int64_t bytes) {
  loaded_ += bytes;
  if (progress_) progress_(std::min(1.0, static_cast<double>(loaded_) / static_cast<double>(total_)), "weights");
}

Tensor WeightLoader::tensor(const std::string& name, const Shape& shape) {
  const TensorInfo& info = expect_tensor(store_, name, {DType::F32, DType::BF16, DType::F16}, shape);
  if (dry_run_) return Tensor();
  Tensor t = store_.read_owned(name);
  const DType want = weight_dtype(info.dtype);
  if (t.dtype() != want) t = t.astype(want);
  if (device_ != Device::kCPU) t = t.to(device_);
  account(info.nbytes);
  return t;
}

int64_t Linear::bytes() const {
  int64_t b = bias.defined() ? bias.nbytes() : 0;
  if (quantized()) return b + q.packed.nbytes() + q.scales.nbytes() + (q.biases.defined() ? q.biases.nbytes() : 0);
  return b + (w.defined() ? w.nbytes() : 0);
}


Linear load_linear(WeightLoader& wl, const std::string& prefix, int64_t out, int64_t in, bool bias) {
  if (wl.config().quantization) {
    // As mlx-lm: a module is quantized when its spec (global or per-module override) says so and
    // the file holds its scales (or a packed uint32 weight, so a missing scales tensor is reported).
    const std::optional<QuantSpec> spec = quant_spec_for(wl.config(), prefix);
    const bool packed = wl.has(prefix + ".weight") && wl.store().info(prefix + ".weight").dtype == DType::U32;
    const bool has_q = wl.has(prefix + ".scales") || wl.has(prefix + ".biases") || packed;
    if (spec && has_q) return load_quantized_linear(wl, prefix, *spec, out, in, bias);
    if (!spec && has_q)
      fail(ErrorCode::kInvalidFile, prefix + ": config.json keeps this module unquantized but the checkpoint holds quantized tensors",
           wl.has(prefix + ".scales") ? prefix + ".scales" : prefix + ".weight");
  }
  Linear l;
  l.out = out;
  l.in = in;
  l.w = wl.tensor(prefix + ".weight", {out, in});
  if (bias) l.bias = wl.tensor(prefix + ".bias", {out});
  return l;
}

Linear linear_rows(const Linear& lin, int64_t begin, int64_t end) {
  MLXB_CHECK(begin >= 0 && begin < end && end <= lin.out, "linear_rows range");
  Linear r = lin;
  r.out = end - begin;
  if (!lin.w.defined() && !lin.quantized()) return r;  // dry run: nothing loaded
  if (lin.quantized()) {
    r.q = quant::row_view(lin.q, begin, end);
    MLXB_CHECK(r.q.packed.defined(), "linear_rows: cut inside a weight tile");
  } else {
    r.w = lin.w.slice_rows(begin, end);
  }
  if (lin.bias.defined()) r.bias = lin.bias.slice_rows(begin, end);
  return r;
}

void linear(const Tensor& x, const Linear& lin, Tensor& y) {
  const Tensor* b = lin.bias.defined() ? &lin.bias : nullptr;
  if (lin.quantized()) ops::qmatmul(x, lin.q, b, y);
  else ops::matmul(x, lin.w, b, y);
}

}  // namespace mlxb
