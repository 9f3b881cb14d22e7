// Weight loading for the model graphs: every tensor goes through WeightLoader, which checks its
// shape and dtype against the config (typed kInvalidFile naming the tensor), copies it into owned
// memory, applies the dtype policy of LoadOptions and moves it to the model's device. Linear
// layers (dense or MLX-quantized) are loaded by load_linear and applied by linear().
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "io/config.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "ops/ops.h"

namespace mlxb {

class WeightLoader {
 public:
  // dry_run: only check names, dtypes and shapes; tensor() then returns undefined tensors.
  WeightLoader(const WeightStore& store, const ModelConfig& cfg, const LoadOptions& options, bool dry_run);

  // A float tensor of exactly `shape`, converted per the dtype policy, on the model's device.
  Tensor tensor(const std::string& name, const Shape& shape);
  bool dry_run() const { return dry_run_; }
  bool has(const std::string& name) const { return store_.has(name); }
  const WeightStore& store() const { return store_; }
  const ModelConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  // Dtype a float weight of file dtype `file` is kept in.
  DType weight_dtype(DType file) const;
  int64_t bytes_loaded() const { return loaded_; }
  // Counts bytes for progress and calls the progress callback.
  void account(int64_t bytes);

 private:
  const WeightStore& store_;
  const ModelConfig& cfg_;
  Device device_;
  DType dtype_;
  bool auto_dtype_;
  bool dry_run_;
  std::function<void(double, const char*)> progress_;
  int64_t total_ = 0, loaded_ = 0;
};

// y = x W^T (+ b), with W dense [out, in] or MLX affine-quantized.
struct Linear {
  Tensor w;                // dense weight [out, in]; undefined when quantized
  QuantWeight q;           // quantized weight when q.packed is defined
  Tensor bias;             // [out] or undefined
  int64_t out = 0, in = 0;
  bool quantized() const { return q.packed.defined(); }
  int64_t bytes() const;
};

// The dtype a model's logits are computed in: float32 when the head is dense and in the
// activation dtype (the matmul then writes its f32 accumulator unrounded; bf16 logits tie where
// transformers' differ by one ulp), else the activation dtype (quantized heads).
inline DType logits_dtype(const Linear& head, DType act) {
  return !head.quantized() && head.w.dtype() == act ? DType::F32 : act;
}

// The MLX quantization of module `prefix` (per-module override, else the global setting);
// nullopt when the checkpoint is not quantized or the override keeps the module in float.
std::optional<QuantSpec> quant_spec_for(const ModelConfig& cfg, const std::string& prefix);
// An MLX affine-quantized layer (weights_quant.cc): packed weight, scales and biases checked
// against `spec` and [out, in]; typed kInvalidFile naming the offending tensor.
Linear load_quantized_linear(WeightLoader& wl, const std::string& prefix, const QuantSpec& spec, int64_t out, int64_t in, bool bias);

// `prefix` names the layer without ".weight" (e.g. "model.layers.0.self_attn.q_proj").
Linear load_linear(WeightLoader& wl, const std::string& prefix, int64_t out, int64_t in, bool bias);
// Rows [begin, end) of the output features (views; used to split fused projections).
Linear linear_rows(const Linear& lin, int64_t begin, int64_t end);
// y [.., out] = x [.., in] through the layer; y is allocated by the caller.
void linear(const Tensor& x, const Linear& lin, Tensor& y);

}  // namespace mlxb
