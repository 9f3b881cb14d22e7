// JS exports for checkpoint artifacts (types/native/artifacts.d.ts): config.json parsing into a
// camelCase object, safetensors inspection and tensor reads. File work runs off the JS thread.
#include <cstring>
#include <memory>

#include "addon/config_js.h"
#include "addon/util.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace mlxb::addon {

namespace {

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kYarn: return "yarn";
  }
  return "default";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kSiLU: return "silu";
    case Activation::kGeluExact: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "silu";
}

Napi::Value opt_number(Napi::Env env, const std::optional<double>& v) {
  return v ? Napi::Number::New(env, *v) : env.Null();
}

Napi::Object rope_to_js(Napi::Env env, const RopeConfig& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("type", rope_type_name(r.type));
  o.Set("theta", r.theta);
  o.Set("factor", r.factor);
  o.Set("lowFreqFactor", r.low_freq_factor);
  o.Set("highFreqFactor", r.high_freq_factor);
  o.Set("originalMaxPosition", static_cast<double>(r.original_max_position));
  o.Set("betaFast", r.beta_fast);
  o.Set("betaSlow", r.beta_slow);
  o.Set("attentionFactor", opt_number(env, r.attention_factor));
  o.Set("mscale", opt_number(env, r.mscale));
  o.Set("mscaleAllDim", opt_number(env, r.mscale_all_dim));
  o.Set("truncate", r.truncate);
  o.Set("partialRotaryFactor", r.partial_rotary_factor);
  return o;
}

Napi::Value quant_to_js(Napi::Env env, const std::optional<QuantSpec>& q) {
  if (!q) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("bits", q->bits);
  o.Set("groupSize", q->group_size);
  return o;
}

Napi::Object config_to_js(Napi::Env env, const ModelConfig& c) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("modelType", c.model_type);
  o.Set("vocabSize", static_cast<double>(c.vocab_size));
  o.Set("hiddenSize", static_cast<double>(c.hidden_size));
  o.Set("intermediateSize", static_cast<double>(c.intermediate_size));
  o.Set("numLayers", static_cast<double>(c.num_layers));
  o.Set("numHeads", static_cast<double>(c.num_heads));
  o.Set("numKvHeads", static_cast<double>(c.num_kv_heads));
  o.Set("headDim", static_cast<double>(c.head_dim));
  o.Set("maxPositionEmbeddings", static_cast<double>(c.max_position_embeddings));
  o.Set("normEps", c.norm_eps);
  o.Set("tieWordEmbeddings", c.tie_word_embeddings);
  o.Set("attentionBias", c.attention_bias);
  o.Set("mlpBias", c.mlp_bias);
  o.Set("hiddenAct", activation_name(c.hidden_act));
  o.Set("rope", rope_to_js(env, c.rope));
  o.Set("ropeLocal", c.rope_local ? Napi::Value(rope_to_js(env, *c.rope_local)) : env.Null());
  o.Set("slidingWindow", static_cast<double>(c.sliding_window));
  Napi::Array layers = Napi::Array::New(env, c.layer_types.size());
  for (size_t i = 0; i < c.layer_types.size(); ++i)
    layers.Set(static_cast<uint32_t>(i), c.layer_types[i] == LayerKind::kSliding ? "sliding_attention" : "full_attention");
  o.Set("layerTypes", layers);
  o.Set("attnLogitSoftcapping", c.attn_logit_softcapping);
  o.Set("finalLogitSoftcapping", c.final_logit_softcapping);
  o.Set("queryPreAttnScalar", c.query_pre_attn_scalar);
  o.Set("torchDtype", c.torch_dtype.empty() ? env.Null() : Napi::String::New(env, c.torch_dtype));
  o.Set("quantization", quant_to_js(env, c.quantization));
  Napi::Array ov = Napi::Array::New(env, c.quant_overrides.size());
  for (size_t i = 0; i < c.quant_overrides.size(); ++i) {
    Napi::Object e = Napi::Object::New(env);
    e.Set("path", c.quant_overrides[i].first);
    e.Set("spec", quant_to_js(env, c.quant_overrides[i].second));
    ov.Set(static_cast<uint32_t>(i), e);
  }
  o.Set("quantOverrides", ov);
  Napi::Array eos = Napi::Array::New(env, c.eos_token_ids.size());
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) eos.Set(static_cast<uint32_t>(i), static_cast<double>(c.eos_token_ids[i]));
  o.Set("eosTokenIds", eos);
  o.Set("bosTokenId", c.bos_token_id < 0 ? env.Null() : Napi::Number::New(env, static_cast<double>(c.bos_token_id)));
  return o;
}

Napi::Array shape_to_js(Napi::Env env, const Shape& s) {
  Napi::Array a = Napi::Array::New(env, s.size());
  for (size_t i = 0; i < s.size(); ++i) a.Set(static_cast<uint32_t>(i), static_cast<double>(s[i]));
  return a;
}

Napi::Object store_to_js(Napi::Env env, const WeightStore& ws) {
  Napi::Object o = Napi::Object::New(env);
  Napi::Array files = Napi::Array::New(env, ws.file_paths().size());
  for (size_t i = 0; i < ws.file_paths().size(); ++i) files.Set(static_cast<uint32_t>(i), ws.file_paths()[i]);
  o.Set("files", files);
  Napi::Array tensors = Napi::Array::New(env, ws.index_.size());
  uint32_t i = 0;
  for (const auto& [name, t] : ws.index_) {
    Napi::Object e = Napi::Object::New(env);
    e.Set("name", name);
    e.Set("dtype", t.file_dtype);
    e.Set("shape", shape_to_js(env, t.shape));
    e.Set("nbytes", static_cast<double>(t.nbytes));
    e.Set("file", t.file);
    tensors.Set(i++, e);
  }
  o.Set("tensors", tensors);
  Napi::Object meta = Napi::Object::New(env);
  for (const auto& [k, v] : ws.metadata()) meta.Set(k, v);
  o.Set("metadata", meta);
  o.Set("totalBytes", static_cast<double>(ws.total_bytes()));
  return o;
}

Napi::Value read_config(const Napi::CallbackInfo& info) {
  std::string dir = arg_string(info, 0, "dir");
  auto out = std::make_shared<ModelConfig>();
  return run_async(info.Env(), [dir, out] { *out = load_model_config(dir); },
                   [out](Napi::Env env) -> Napi::Value { return config_to_js(env, *out); });
}

Napi::Value parse_config(const Napi::CallbackInfo& info) {
  std::string text = arg_string(info, 0, "text");
  return guarded(info.Env(), [&] { return Napi::Value(config_to_js(info.Env(), parse_model_config(text))); });
}

Napi::Value inspect_weights(const Napi::CallbackInfo& info) {
  std::string path = arg_string(info, 0, "path");
  auto out = std::make_shared<std::unique_ptr<WeightStore>>();
  return run_async(info.Env(), [path, out] { *out = WeightStore::open(path); },
                   [out](Napi::Env env) -> Napi::Value { return store_to_js(env, **out); });
}

Napi::Value read_tensor(const Napi::CallbackInfo& info) {
  std::string path = arg_string(info, 0, "path");
  std::string name = arg_string(info, 1, "name");
  struct Result {
    Tensor owned;
    Tensor view;
    std::string file_dtype;
  };
  auto out = std::make_shared<Result>();
  return run_async(
      info.Env(),
      [path, name, out] {
        auto ws = WeightStore::open(path);
        out->file_dtype = ws->info(name).file_dtype;
        out->owned = ws->read_owned(name);
        out->view = ws->get(name);  // keeps the mapping alive past `ws`
      },
      [out](Napi::Env env) -> Napi::Value {
        Napi::Object o = Napi::Object::New(env);
        o.Set("dtype", out->file_dtype);
        o.Set("shape", shape_to_js(env, out->owned.shape()));
        size_t n = static_cast<size_t>(out->owned.nbytes());
        Napi::ArrayBuffer owned = Napi::ArrayBuffer::New(env, n);
        Napi::ArrayBuffer mapped = Napi::ArrayBuffer::New(env, n);
        if (n) {
          std::memcpy(owned.Data(), out->owned.data(), n);
          std::memcpy(mapped.Data(), out->view.data(), n);
        }
        o.Set("data", owned);
        o.Set("mapped", mapped);
        o.Set("ownedAligned", reinterpret_cast<uintptr_t>(out->owned.data()) % 64 == 0);
        return o;
      });
}

void init(Napi::Env env, Napi::Object exports) {
  exports.Set("readConfig", Napi::Function::New(env, read_config));
  exports.Set("parseConfig", Napi::Function::New(env, parse_config));
  exports.Set("inspectWeights", Napi::Function::New(env, inspect_weights));
  exports.Set("readTensor", Napi::Function::New(env, read_tensor));
}

Registrar reg(init);

}  // namespace

Napi::Object model_config_to_js(Napi::Env env, const ModelConfig& c) { return config_to_js(env, c); }

}  // namespace mlxb::addon
