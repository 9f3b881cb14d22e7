// MLX affine quantization settings: `quantization` (mlx-lm writes the same dict again as
// `quantization_config`) = {group_size, bits, [mode], <module path>: {group_size, bits} | false
// | true}. A Hugging Face `quantization_config` naming a quant_method (gptq, awq, fp8, ...) is a
// format we do not run: kUnsupported.
#include "io/config_reader.h"

namespace mlxb::config_detail {

namespace {

bool supported_bits(int64_t b) { return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }
bool supported_group(int64_t g) { return g == 32 || g == 64 || g == 128; }

void check_mode(const Reader& q) {
  if (const json::Value* mode = q.opt_string("mode"); mode && mode->as_string() != "affine")
    fail(ErrorCode::kUnsupported, "config.json: quantization mode '" + mode->as_string() + "' is not supported (affine only)",
         q.field("mode"));
}

QuantSpec read_spec(const Reader& q, const QuantSpec* fallback) {
  QuantSpec s;
  s.bits = static_cast<int>(fallback ? q.opt_int("bits", fallback->bits, 1, 64) : q.req_int("bits", 1, 64));
  s.group_size = static_cast<int>(fallback ? q.opt_int("group_size", fallback->group_size, 1, 1 << 20)
                                           : q.req_int("group_size", 1, 1 << 20));
  if (!supported_bits(s.bits))
    fail(ErrorCode::kUnsupported, "config.json: " + std::to_string(s.bits) + "-bit quantization is not supported (2, 3, 4, 5, 6, 8)",
         q.field("bits"));
  if (!supported_group(s.group_size))
    fail(ErrorCode::kUnsupported, "config.json: quantization group size " + std::to_string(s.group_size) +
                                      " is not supported (32, 64, 128)", q.field("group_size"));
  check_mode(q);
  return s;
}

}  // namespace

void parse_quantization(const Reader& root, ModelConfig& c) {
  std::string key = "quantization";
  const json::Value* q = root.get(key);
  if (!q) { key = "quantization_config"; q = root.get(key); }
  if (!q) return;
  if (!q->is_object()) bad_config(key, "must be an object, got " + Reader::describe(*q));
  Reader qr(*q, key);
  if (const json::Value* method = qr.get("quant_method")) {
    std::string m = method->is_string() ? method->as_string() : Reader::describe(*method);
    fail(ErrorCode::kUnsupported, "config.json: quantization method '" + m + "' is not supported (MLX affine only)",
         qr.field("quant_method"));
  }
  QuantSpec global = read_spec(qr, nullptr);
  c.quantization = global;
  for (const auto& [path, v] : q->members()) {
    if (path == "bits" || path == "group_size" || path == "mode") continue;
    if (v.is_bool()) {
      c.quant_overrides.emplace_back(path, v.as_bool() ? std::optional<QuantSpec>(global) : std::nullopt);
    } else if (v.is_object()) {
      c.quant_overrides.emplace_back(path, read_spec(Reader(v, qr.field(path)), &global));
    } else {
      bad_config(qr.field(path), "must be {group_size, bits} or a boolean, got " + Reader::describe(v));
    }
  }
}

}  // namespace mlxb::config_detail
