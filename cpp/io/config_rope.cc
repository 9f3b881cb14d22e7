// Rotary-embedding settings from every config dialect into RopeConfig:
//   transformers 4.x  rope_theta + rope_scaling {type | rope_type, factor, ...} (+ Gemma 3's
//                     rope_local_base_freq for sliding layers; rope_scaling is global-only there)
//   transformers >= 5 rope_parameters {rope_type, rope_theta, ...}, or per layer type
//                     {"full_attention": {...}, "sliding_attention": {...}}
// plus partial_rotary_factor (top level, or inside the rope dict in the newer form).
#include <cmath>

#include "io/config_reader.h"

namespace mlxb::config_detail {

namespace {

RopeType rope_type_of(const Reader& d, const std::string& default_name) {
  std::string key = "rope_type";
  const json::Value* t = d.opt_string("rope_type");
  if (!t) { key = "type"; t = d.opt_string("type"); }
  std::string name = t ? t->as_string() : default_name;
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "yarn") return RopeType::kYarn;
  fail(ErrorCode::kUnsupported, "config.json: rope type '" + name + "' is not supported (default, linear, dynamic, llama3, yarn)",
       d.field(key));
}

void check_rotary_dims(const Reader& r, const std::string& key, double factor, int64_t head_dim) {
  if (factor > 1.0) bad_config(r.field(key), "must be in (0, 1]");
  int64_t rot = static_cast<int64_t>(static_cast<double>(head_dim) * factor);  // int() as transformers does
  if (rot < 2 || rot % 2 != 0)
    bad_config(r.field(key), "gives a rotary dimension of " + std::to_string(rot) + " for head_dim " +
                                 std::to_string(head_dim) + " (must be even and >= 2)");
}

// One rope dict (rope_scaling or one entry of rope_parameters). `theta` and `partial` are the
// values from the top level; the dict's own rope_theta / partial_rotary_factor win.
RopeConfig parse_dict(const Reader& d, double theta, double partial, const ModelConfig& c) {
  RopeConfig r;
  r.type = rope_type_of(d, "default");
  r.theta = d.opt_num("rope_theta", theta);
  if (d.has("partial_rotary_factor")) {
    r.partial_rotary_factor = d.opt_num("partial_rotary_factor", 1.0);
    check_rotary_dims(d, "partial_rotary_factor", r.partial_rotary_factor, c.head_dim);
  } else {
    r.partial_rotary_factor = partial;
  }
  if (r.type == RopeType::kDefault) return r;
  r.factor = d.req_num("factor");
  r.original_max_position = d.opt_int("original_max_position_embeddings", 0);
  switch (r.type) {
    case RopeType::kLlama3:
      r.low_freq_factor = d.req_num("low_freq_factor");
      r.high_freq_factor = d.req_num("high_freq_factor");
      if (!(r.high_freq_factor > r.low_freq_factor))
        bad_config(d.field("high_freq_factor"), "must be greater than low_freq_factor");
      r.original_max_position = d.req_int("original_max_position_embeddings");
      break;
    case RopeType::kYarn:
      r.beta_fast = d.opt_num("beta_fast", 32.0);
      r.beta_slow = d.opt_num("beta_slow", 1.0);
      if (d.has("attention_factor")) r.attention_factor = d.opt_num("attention_factor", 1.0);
      if (d.has("mscale")) r.mscale = d.opt_num("mscale", 1.0, false);
      if (d.has("mscale_all_dim")) r.mscale_all_dim = d.opt_num("mscale_all_dim", 0.0, false);
      r.truncate = d.opt_bool("truncate", true);
      break;
    default:
      break;
  }
  return r;
}

}  // namespace

void parse_rope(const Reader& root, ModelConfig& c) {
  const bool gemma3 = c.model_type == "gemma3_text";
  double theta = root.opt_num("rope_theta", gemma3 ? 1'000'000.0 : 10'000.0);
  double partial = root.opt_num("partial_rotary_factor", 1.0);
  if (root.has("partial_rotary_factor")) check_rotary_dims(root, "partial_rotary_factor", partial, c.head_dim);

  if (const json::Value* rp = root.get("rope_parameters")) {
    if (!rp->is_object()) bad_config("rope_parameters", "must be an object, got " + Reader::describe(*rp));
    bool per_layer_type = false;
    for (const auto& [k, v] : rp->members()) per_layer_type = per_layer_type || v.is_object();
    if (!per_layer_type) {
      c.rope = parse_dict(Reader(*rp, "rope_parameters"), theta, partial, c);
      return;
    }
    Reader per(*rp, "rope_parameters");
    for (const auto& [k, v] : rp->members()) {
      if (k != "full_attention" && k != "sliding_attention")
        fail(ErrorCode::kUnsupported, "config.json: rope_parameters for layer type '" + k + "' are not supported", per.field(k));
      if (!v.is_object()) bad_config(per.field(k), "must be an object, got " + Reader::describe(v));
    }
    const json::Value* full = per.get("full_attention");
    if (!full) bad_config(per.field("full_attention"), "is missing");
    c.rope = parse_dict(Reader(*full, per.field("full_attention")), theta, partial, c);
    if (const json::Value* sl = per.get("sliding_attention"))
      c.rope_local = parse_dict(Reader(*sl, per.field("sliding_attention")), theta, partial, c);
    return;
  }

  if (const json::Value* rs = root.get("rope_scaling")) {
    if (!rs->is_object()) bad_config("rope_scaling", "must be an object, got " + Reader::describe(*rs));
    c.rope = parse_dict(Reader(*rs, "rope_scaling"), theta, partial, c);
  } else {
    c.rope = RopeConfig{};
    c.rope.theta = theta;
    c.rope.partial_rotary_factor = partial;
  }
  if (gemma3) {  // 4.x Gemma 3: sliding layers rotate with their own base, never scaled
    RopeConfig local;
    local.theta = root.opt_num("rope_local_base_freq", 10'000.0);
    local.partial_rotary_factor = partial;
    c.rope_local = local;
  }
}

}  // namespace mlxb::config_detail
