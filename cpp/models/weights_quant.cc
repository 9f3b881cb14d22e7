// MLX affine-quantized layers for load_linear (see weights.h): a module whose config spec
// (`quantization`, or its per-module override) says quantized holds `<prefix>.weight` (uint32
// [out, in * bits / 32]), `<prefix>.scales` and `<prefix>.biases` ([out, in / group_size], one
// float dtype). Everything is checked against the spec before a byte is read; a mismatch is a
// typed kInvalidFile naming the tensor. Embeddings load the same way (tied heads reuse them).
#include <optional>

#include "models/weights.h"
#include "quant/affine.h"

namespace mlxb {

std::optional<QuantSpec> quant_spec_for(const ModelConfig& cfg, const std::string& prefix) {
  if (!cfg.quantization) return std::nullopt;
  for (const auto& [path, spec] : cfg.quant_overrides)
    if (path == prefix) return spec;
  return cfg.quantization;
}

Linear load_quantized_linear(WeightLoader& wl, const std::string& prefix, const QuantSpec& spec, int64_t out, int64_t in,
                             bool bias) {
  const std::string wname = prefix + ".weight", sname = prefix + ".scales", bname = prefix + ".biases";
  if (in % spec.group_size != 0)
    fail(ErrorCode::kInvalidFile, prefix + ": input size " + std::to_string(in) + " is not a multiple of the quantization group size " +
                                      std::to_string(spec.group_size), wname);
  if (!wl.has(sname)) fail(ErrorCode::kInvalidFile, prefix + ": quantized layer without scales (missing tensor " + sname + ")", sname);
  if (!wl.has(bname)) fail(ErrorCode::kInvalidFile, prefix + ": quantized layer without biases (missing tensor " + bname + "; only affine quantization is supported)", bname);
  const WeightStore& store = wl.store();
  const int64_t groups = in / spec.group_size;
  const TensorInfo& wi = store.info(wname);
  if (wi.dtype != DType::U32)
    fail(ErrorCode::kInvalidFile, wname + ": a quantized weight must be uint32, got " + dtype_name(wi.dtype), wname);
  if (wi.shape != Shape{out, quant::packed_cols(in, spec.bits)})
    fail(ErrorCode::kInvalidFile, wname + ": shape " + shape_string(wi.shape) + " does not hold [" + std::to_string(out) + ", " +
                                      std::to_string(in) + "] at " + std::to_string(spec.bits) + " bits (expected " +
                                      shape_string({out, quant::packed_cols(in, spec.bits)}) + ")", wname);
  const TensorInfo& si = expect_tensor(store, sname, {DType::F32, DType::BF16, DType::F16}, {-1, -1});
  if (si.shape != Shape{out, groups})
    fail(ErrorCode::kInvalidFile, sname + ": shape " + shape_string(si.shape) + " does not match " + std::to_string(out) + " rows of " +
                                      std::to_string(groups) + " groups of " + std::to_string(spec.group_size) + " (expected " +
                                      shape_string({out, groups}) + "; wrong group size?)", sname);
  const TensorInfo& bi = expect_tensor(store, bname, {si.dtype}, {out, groups});
  (void)bi;
  Linear l;
  l.out = out;
  l.in = in;
  if (bias) l.bias = wl.tensor(prefix + ".bias", {out});
  if (wl.dry_run()) return l;
  Tensor packed = store.read_owned(wname), scales = store.read_owned(sname), biases = store.read_owned(bname);
  if (wl.device() != Device::kCPU) {
    packed = packed.to(wl.device());
    scales = scales.to(wl.device());
    biases = biases.to(wl.device());
  }
  l.q = quant::make_weight(packed, scales, biases, spec.bits, spec.group_size, prefix);
  wl.account(wi.nbytes + si.nbytes + bi.nbytes);
  return l;
}

}  // namespace mlxb
