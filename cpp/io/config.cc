// config.json -> ModelConfig for the supported families. Defaults for absent keys follow the
// transformers class of each family (what transformers itself would load); keys no family can do
// without (sizes, head counts, vocab) must be present. Rope and quantization live in
// config_rope.cc and config_quant.cc.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "io/config.h"
#include "io/config_reader.h"

namespace mlxb {

using config_detail::bad_config;
using config_detail::Reader;

namespace {

struct FamilyTraits {
  const char* model_type;
  bool tie_embeddings;     // transformers class default of tie_word_embeddings
  bool attention_bias;     // default when the key is absent (qwen2 always has q/k/v biases)
  const char* activation;  // default hidden_act
  double norm_eps;
};

constexpr FamilyTraits kFamilies[] = {
    {"llama", false, false, "silu", 1e-6},          {"mistral", false, false, "silu", 1e-6},
    {"qwen2", false, true, "silu", 1e-6},           {"qwen3", false, false, "silu", 1e-6},
    {"gemma2", true, false, "gelu_pytorch_tanh", 1e-6}, {"gemma3_text", true, false, "gelu_pytorch_tanh", 1e-6},
    {"phi3", false, false, "silu", 1e-5},
};

bool is_gemma(const std::string& t) { return t == "gemma2" || t == "gemma3_text"; }

Activation parse_activation(const Reader& r, const FamilyTraits& fam) {
  // Gemma reads hidden_activation first (hidden_act is a legacy duplicate there).
  std::string key = is_gemma(fam.model_type) && r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const json::Value* v = r.opt_string(key);
  std::string name = v ? v->as_string() : fam.activation;
  if (name == "silu" || name == "swish") return Activation::kSiLU;
  if (name == "gelu" || name == "gelu_python") return Activation::kGeluExact;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast") return Activation::kGeluTanh;
  fail(ErrorCode::kUnsupported, "config.json: activation '" + name + "' is not supported", key);
}

LayerKind layer_kind(const std::string& field, const json::Value& v) {
  if (!v.is_string()) bad_config(field, "entries must be strings, got " + Reader::describe(v));
  const std::string& s = v.as_string();
  if (s == "full_attention") return LayerKind::kFull;
  if (s == "sliding_attention") return LayerKind::kSliding;
  if (s == "chunked_attention" || s == "linear_attention" || s == "conv" || s == "mamba")
    fail(ErrorCode::kUnsupported, "config.json: layer type '" + s + "' is not supported", field);
  bad_config(field, "holds unknown layer type '" + s + "'");
}

void parse_layers(const Reader& r, ModelConfig& c) {
  const int64_t n = c.num_layers;
  const std::string& t = c.model_type;
  if (const json::Value* lt = r.get("layer_types")) {
    if (!lt->is_array()) bad_config("layer_types", "must be an array, got " + Reader::describe(*lt));
    if (static_cast<int64_t>(lt->items().size()) != n)
      bad_config("layer_types", "has " + std::to_string(lt->items().size()) + " entries for " + std::to_string(n) + " layers");
    for (const json::Value& v : lt->items()) c.layer_types.push_back(layer_kind("layer_types", v));
  } else if (t == "gemma2") {  // even layers slide
    for (int64_t i = 0; i < n; ++i) c.layer_types.push_back(i % 2 == 0 ? LayerKind::kSliding : LayerKind::kFull);
  } else if (t == "gemma3_text") {  // every pattern-th layer is global
    int64_t pattern = r.opt_int("sliding_window_pattern", 6, 1, 1 << 20);
    for (int64_t i = 0; i < n; ++i) c.layer_types.push_back((i + 1) % pattern == 0 ? LayerKind::kFull : LayerKind::kSliding);
  } else if (t == "mistral" || t == "phi3") {  // a window, when set, applies to every layer
    LayerKind k = r.has("sliding_window") ? LayerKind::kSliding : LayerKind::kFull;
    c.layer_types.assign(static_cast<size_t>(n), k);
  } else if ((t == "qwen2" || t == "qwen3") && r.opt_bool("use_sliding_window", false) && r.has("sliding_window")) {
    int64_t from = r.opt_int("max_window_layers", n, 0);
    for (int64_t i = 0; i < n; ++i) c.layer_types.push_back(i >= from ? LayerKind::kSliding : LayerKind::kFull);
  } else {
    c.layer_types.assign(static_cast<size_t>(n), LayerKind::kFull);
  }
  bool any_sliding = false;
  for (LayerKind k : c.layer_types) any_sliding = any_sliding || k == LayerKind::kSliding;
  if (any_sliding) {
    if (!r.has("sliding_window")) bad_config("sliding_window", "is missing but some layers use sliding-window attention");
    c.sliding_window = r.req_int("sliding_window");
  } else {
    r.opt_int("sliding_window", 0, 0);  // type-checked even when unused
    c.sliding_window = 0;
  }
}

void parse_token_ids(const Reader& r, ModelConfig& c) {
  if (const json::Value* eos = r.get("eos_token_id")) {
    if (eos->is_array()) {
      for (const json::Value& v : eos->items()) c.eos_token_ids.push_back(r.int_at("eos_token_id", v, 0, config_detail::kMaxExtent));
    } else {
      c.eos_token_ids.push_back(r.int_at("eos_token_id", *eos, 0, config_detail::kMaxExtent));
    }
  }
  c.bos_token_id = r.opt_int("bos_token_id", -1, 0);
}

ModelConfig parse_root(const json::Value& root) {
  if (!root.is_object()) bad_config("config", "must be a JSON object, got " + Reader::describe(root));
  Reader r(root, "");
  const json::Value* mt = r.opt_string("model_type");
  if (!mt) bad_config("model_type", "is missing");
  if (mt->as_string() == "gemma3")
    fail(ErrorCode::kUnsupported, "config.json: model_type 'gemma3' is the multimodal Gemma 3; only the text model "
                                  "(gemma3_text) is supported", "model_type");
  const FamilyTraits* fam = nullptr;
  for (const FamilyTraits& f : kFamilies)
    if (mt->as_string() == f.model_type) fam = &f;
  if (!fam)
    fail(ErrorCode::kUnsupported, "config.json: model_type '" + mt->as_string() +
                                      "' is not supported (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3)", "model_type");
  ModelConfig c;
  c.model_type = fam->model_type;
  c.vocab_size = r.req_int("vocab_size");
  c.hidden_size = r.req_int("hidden_size", 1, 1 << 20);
  c.intermediate_size = r.req_int("intermediate_size", 1, 1 << 24);
  c.num_layers = r.req_int("num_hidden_layers", 1, 1 << 12);
  c.num_heads = r.req_int("num_attention_heads", 1, 1 << 14);
  c.num_kv_heads = r.opt_int("num_key_value_heads", c.num_heads, 1, 1 << 14);
  if (c.num_heads % c.num_kv_heads != 0)
    bad_config("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) + ") must divide num_attention_heads (" +
                                          std::to_string(c.num_heads) + ")");
  if (r.has("head_dim")) {
    c.head_dim = r.req_int("head_dim", 1, 1 << 14);
  } else {
    if (c.hidden_size % c.num_heads != 0)
      bad_config("num_attention_heads", "(" + std::to_string(c.num_heads) + ") must divide hidden_size (" +
                                            std::to_string(c.hidden_size) + ") when head_dim is absent");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) bad_config("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  // Products that size the embedding, MLP and attention weights must stay sane (< 2^40 elements).
  constexpr int64_t kMaxElems = int64_t{1} << 40;
  if (c.vocab_size * c.hidden_size > kMaxElems) bad_config("vocab_size", "x hidden_size is too large");
  if (c.num_heads * c.head_dim * c.hidden_size > kMaxElems) bad_config("head_dim", "x num_attention_heads x hidden_size is too large");
  c.max_position_embeddings = r.req_int("max_position_embeddings");
  c.norm_eps = r.opt_num("rms_norm_eps", fam->norm_eps);
  if (c.norm_eps >= 1.0) bad_config("rms_norm_eps", "must be < 1");
  c.tie_word_embeddings = r.opt_bool("tie_word_embeddings", fam->tie_embeddings);
  c.attention_bias = r.opt_bool("attention_bias", fam->attention_bias);
  c.mlp_bias = r.opt_bool("mlp_bias", false);
  c.hidden_act = parse_activation(r, *fam);
  config_detail::parse_rope(r, c);
  parse_layers(r, c);
  c.attn_logit_softcapping = r.opt_num("attn_logit_softcapping", 0.0);
  c.final_logit_softcapping = r.opt_num("final_logit_softcapping", 0.0);
  c.query_pre_attn_scalar = r.opt_num("query_pre_attn_scalar", 0.0);
  if (const json::Value* d = r.opt_string("torch_dtype")) c.torch_dtype = d->as_string();
  else if (const json::Value* d2 = r.opt_string("dtype")) c.torch_dtype = d2->as_string();
  config_detail::parse_quantization(r, c);
  parse_token_ids(r, c);
  return c;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text) {
  json::Value root;
  try {
    json::ParseOptions o;
    o.allow_nan_literals = true;
    root = json::parse(json_text, o);
  } catch (const json::JsonError& e) {
    fail(ErrorCode::kInvalidConfig, std::string("config.json is not valid JSON: ") + e.what(), "config");
  }
  return parse_root(root);
}

ModelConfig load_model_config(const std::string& dir) {
  std::string path = (!dir.empty() && dir.back() == '/') ? dir + "config.json" : dir + "/config.json";
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) fail(ErrorCode::kIo, "cannot open " + path, path);
  if (st.st_size > (int64_t{64} << 20)) fail(ErrorCode::kInvalidConfig, path + " is larger than 64 MiB", "config");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kIo, "cannot open " + path, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str());
}

}  // namespace mlxb
