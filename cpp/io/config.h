// config.json -> one typed form of hyperparameters, whatever dialect wrote it (transformers 4.x
// `rope_theta`/`rope_scaling`, transformers >= 5 `rope_parameters` and `layer_types`, Gemma 3's
// `rope_local_base_freq`/`sliding_window_pattern`, MLX `quantization`). Families read only this
// struct, never the JSON. Every missing or impossible field is an Error(kInvalidConfig, ..., field)
// raised before any large allocation; unknown model_type or rope type is kUnsupported.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace mlxb {

enum class RopeType : uint8_t { kDefault, kLinear, kDynamic, kLlama3, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                 // linear / dynamic / llama3 / yarn
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position = 0;   // llama3 / yarn / dynamic (0 = max_position_embeddings)
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  std::optional<double> attention_factor;  // yarn: explicit mscale of cos/sin
  std::optional<double> mscale, mscale_all_dim;  // yarn (DeepSeek form)
  bool truncate = true;                // yarn
  double partial_rotary_factor = 1.0;  // rot_dim = head_dim * factor (phi3 etc.)
};

enum class LayerKind : uint8_t { kFull, kSliding };

struct QuantSpec {  // MLX affine group quantization
  int bits = 0;
  int group_size = 0;
};

struct ModelConfig {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;                  // explicit or hidden / heads
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-6;                // rms_norm_eps / layer_norm_eps
  bool tie_word_embeddings = false;
  bool attention_bias = false;           // q/k/v (and o for some) biases
  bool mlp_bias = false;
  Activation hidden_act = Activation::kSiLU;
  RopeConfig rope;                       // full-attention layers
  std::optional<RopeConfig> rope_local;  // sliding layers when they differ (Gemma 3)
  int64_t sliding_window = 0;            // 0 = none
  std::vector<LayerKind> layer_types;    // size num_layers, always filled
  double attn_logit_softcapping = 0.0;   // 0 = none
  double final_logit_softcapping = 0.0;  // 0 = none
  double query_pre_attn_scalar = 0.0;    // 0 = head_dim (attention scale = scalar^-0.5)
  std::string torch_dtype;               // "bfloat16", "float16", "float32" or empty
  std::optional<QuantSpec> quantization;               // global MLX setting
  std::vector<std::pair<std::string, std::optional<QuantSpec>>> quant_overrides;  // per-layer; nullopt = not quantized
  std::vector<int64_t> eos_token_ids;    // from config.json (generation_config is read in TS)
  int64_t bos_token_id = -1;
};

// Parses and validates; `json_text` is the file's contents. Throws kInvalidConfig / kUnsupported.
ModelConfig parse_model_config(const std::string& json_text);
// Reads `dir`/config.json (kIo when missing) and parses it.
ModelConfig load_model_config(const std::string& dir);

}  // namespace mlxb
