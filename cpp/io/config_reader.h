// Typed access to one JSON object of config.json with field-named errors. `prefix` makes nested
// fields read as "rope_scaling.factor". JSON null counts as absent everywhere (HF writes null for
// unset optional fields). Internal to cpp/io/config*.cc.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/config.h"
#include "io/json.h"

namespace mlxb::config_detail {

// Largest size-like value accepted anywhere in a config: keeps every product of two of them
// inside int64 and refuses absurd allocations before they happen.
constexpr int64_t kMaxExtent = (int64_t{1} << 31) - 1;

[[noreturn]] inline void bad_config(const std::string& field, const std::string& what) {
  fail(ErrorCode::kInvalidConfig, "config.json: " + field + " " + what, field);
}

class Reader {
 public:
  Reader(const json::Value& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string field(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  const json::Value& object() const { return obj_; }

  // The value of `key`, or nullptr when absent or null.
  const json::Value* get(const std::string& key) const {
    const json::Value* v = obj_.find(key);
    return (v && !v->is_null()) ? v : nullptr;
  }
  bool has(const std::string& key) const { return get(key) != nullptr; }

  int64_t int_at(const std::string& key, const json::Value& v, int64_t min, int64_t max) const {
    if (!v.is_int()) bad_config(field(key), std::string("must be an integer, got ") + describe(v));
    if (v.as_int() < min) bad_config(field(key), "must be >= " + std::to_string(min) + ", got " + std::to_string(v.as_int()));
    if (v.as_int() > max) bad_config(field(key), "must be <= " + std::to_string(max) + ", got " + std::to_string(v.as_int()));
    return v.as_int();
  }
  int64_t req_int(const std::string& key, int64_t min = 1, int64_t max = kMaxExtent) const {
    const json::Value* v = get(key);
    if (!v) bad_config(field(key), "is missing");
    return int_at(key, *v, min, max);
  }
  int64_t opt_int(const std::string& key, int64_t def, int64_t min = 1, int64_t max = kMaxExtent) const {
    const json::Value* v = get(key);
    return v ? int_at(key, *v, min, max) : def;
  }

  // Finite number; `positive` additionally requires > 0.
  double num_at(const std::string& key, const json::Value& v, bool positive) const {
    if (!v.is_number()) bad_config(field(key), std::string("must be a number, got ") + describe(v));
    double d = v.as_double();
    if (!std::isfinite(d)) bad_config(field(key), "must be finite");
    if (positive && !(d > 0.0)) bad_config(field(key), "must be > 0, got " + std::to_string(d));
    return d;
  }
  double req_num(const std::string& key, bool positive = true) const {
    const json::Value* v = get(key);
    if (!v) bad_config(field(key), "is missing");
    return num_at(key, *v, positive);
  }
  double opt_num(const std::string& key, double def, bool positive = true) const {
    const json::Value* v = get(key);
    return v ? num_at(key, *v, positive) : def;
  }

  bool opt_bool(const std::string& key, bool def) const {
    const json::Value* v = get(key);
    if (!v) return def;
    if (!v->is_bool()) bad_config(field(key), std::string("must be true or false, got ") + describe(*v));
    return v->as_bool();
  }

  const json::Value* opt_string(const std::string& key) const {
    const json::Value* v = get(key);
    if (v && !v->is_string()) bad_config(field(key), std::string("must be a string, got ") + describe(*v));
    return v;
  }

  static std::string describe(const json::Value& v) {
    if (v.is_string()) return "\"" + (v.as_string().size() > 40 ? v.as_string().substr(0, 40) + "..." : v.as_string()) + "\"";
    if (v.is_number()) return std::isfinite(v.as_double()) ? "number " + std::to_string(v.as_double()) : "a non-finite number";
    if (v.is_bool()) return v.as_bool() ? "true" : "false";
    return json::kind_name(v.kind());
  }

 private:
  const json::Value& obj_;
  std::string prefix_;
};

// config_rope.cc: fills c.rope / c.rope_local from rope_parameters, rope_scaling, rope_theta,
// partial_rotary_factor and rope_local_base_freq. Needs c.model_type, c.head_dim and
// c.max_position_embeddings set.
void parse_rope(const Reader& root, ModelConfig& c);
// config_quant.cc: fills c.quantization / c.quant_overrides from MLX `quantization` (or an
// MLX-style `quantization_config`).
void parse_quantization(const Reader& root, ModelConfig& c);

}  // namespace mlxb::config_detail
