// JS classes of the generation area: `Sampler` (the sampling chain on caller logits, for tests
// and custom loops), `GenerationSequence` (one request: prefill + one async call per token that
// forwards and samples on a worker thread), `createTableModel` (a bigram lookup model for tests)
// and `generationStats` (live native sequences). Options arrive validated by lib/sampling; they
// are re-checked here and in the Sampler constructor.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "addon/model_ref.h"
#include "addon/util.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/table_model.h"

namespace mlxb::addon {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  fail(ErrorCode::kInvalidArgument, field + " " + what, field);
}

double opt_number(const Napi::Object& o, const char* key, double dflt) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return dflt;
  if (!v.IsNumber()) bad(key, "must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d)) bad(key, "must be finite");
  return d;
}

int64_t opt_int(const Napi::Object& o, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  double d = opt_number(o, key, static_cast<double>(dflt));
  if (d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    bad(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int64_t>(d);
}

SamplingParams parse_params(Napi::Value v) {
  SamplingParams p;
  if (v.IsUndefined() || v.IsNull()) return p;
  if (!v.IsObject()) bad("options", "must be an object");
  Napi::Object o = v.As<Napi::Object>();
  p.temperature = opt_number(o, "temperature", p.temperature);
  p.top_k = opt_int(o, "topK", 0, 0, INT32_MAX);
  p.top_p = opt_number(o, "topP", p.top_p);
  p.min_p = opt_number(o, "minP", p.min_p);
  p.repetition_penalty = opt_number(o, "repetitionPenalty", p.repetition_penalty);
  p.penalty_window = opt_int(o, "repetitionContextSize", p.penalty_window, 0, INT32_MAX);
  p.presence_penalty = opt_number(o, "presencePenalty", p.presence_penalty);
  p.frequency_penalty = opt_number(o, "frequencyPenalty", p.frequency_penalty);
  p.top_logprobs = opt_int(o, "topLogprobs", 0, 0, INT32_MAX);
  Napi::Value lp = o.Get("logprobs");
  if (!lp.IsUndefined() && !lp.IsNull()) {
    if (!lp.IsBoolean()) bad("logprobs", "must be a boolean");
    p.logprobs = lp.As<Napi::Boolean>().Value();
  }
  Napi::Value seed = o.Get("seed");
  if (!seed.IsUndefined() && !seed.IsNull()) {
    p.seed = static_cast<uint64_t>(opt_int(o, "seed", 0, 0, (int64_t{1} << 53) - 1));
    p.has_seed = true;
  }
  Napi::Value bias = o.Get("logitBias");
  if (!bias.IsUndefined() && !bias.IsNull()) {
    if (!bias.IsArray()) bad("logitBias", "must be an array of [tokenId, bias] pairs");
    Napi::Array a = bias.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) {
      Napi::Value e = a.Get(i);
      if (!e.IsArray() || e.As<Napi::Array>().Length() != 2) bad("logitBias", "must be an array of [tokenId, bias] pairs");
      Napi::Array pair = e.As<Napi::Array>();
      Napi::Value id = pair.Get(uint32_t{0}), b = pair.Get(uint32_t{1});
      if (!id.IsNumber() || !b.IsNumber()) bad("logitBias", "entries must be numbers");
      double di = id.As<Napi::Number>().DoubleValue();
      if (di != std::floor(di) || di < 0 || di > INT32_MAX) bad("logitBias", "token ids must be integers >= 0");
      p.logit_bias.emplace_back(static_cast<int32_t>(di), b.As<Napi::Number>().FloatValue());
    }
  }
  return p;
}

Napi::Float32Array floats_arg(const Napi::CallbackInfo& info, size_t i, int64_t n, const char* field = "logits") {
  if (info.Length() <= i || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    bad(field, "must be a Float32Array");
  }
  Napi::Float32Array a = info[i].As<Napi::Float32Array>();
  if (static_cast<int64_t>(a.ElementLength()) != n) bad(field, "must hold " + std::to_string(n) + " values");
  return a;
}

Napi::Object result_object(Napi::Env env, const SampleResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("token", r.token);
  o.Set("logprob", r.logprob);
  if (!r.top.empty()) {
    Napi::Int32Array ids = Napi::Int32Array::New(env, r.top.size());
    Napi::Float32Array lps = Napi::Float32Array::New(env, r.top.size());
    for (size_t i = 0; i < r.top.size(); ++i) {
      ids[i] = r.top[i].token;
      lps[i] = r.top[i].logprob;
    }
    o.Set("topTokens", ids);
    o.Set("topLogprobs", lps);
  }
  return o;
}

std::vector<int32_t> ids_arg(const Napi::Value& v, const char* field) {
  std::vector<int32_t> ids;
  if (v.IsNumber()) {
    ids.push_back(v.As<Napi::Number>().Int32Value());
  } else if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_int32_array) {
    Napi::Int32Array a = v.As<Napi::Int32Array>();
    ids.assign(a.Data(), a.Data() + a.ElementLength());
  } else {
    bad(field, "must be a token id or an Int32Array");
  }
  return ids;
}

// --- Sampler -------------------------------------------------------------------------------
class SamplerWrap : public Napi::ObjectWrap<SamplerWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Sampler", {
      InstanceMethod<&SamplerWrap::process>("process"),
      InstanceMethod<&SamplerWrap::distribution>("distribution"),
      InstanceMethod<&SamplerWrap::sample>("sample"),
      InstanceMethod<&SamplerWrap::accept>("accept"),
    });
  }
  explicit SamplerWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SamplerWrap>(info) {
    guarded(info.Env(), [&] {
      if (info.Length() < 2 || !info[1].IsNumber()) bad("vocab", "must be a number");
      sampler_ = std::make_unique<Sampler>(parse_params(info[0]), info[1].As<Napi::Number>().Int64Value());
      return info.Env().Undefined();
    });
  }

 private:
  Sampler& s(Napi::Env env) {
    if (!sampler_) fail(ErrorCode::kInvalidArgument, "sampler failed to construct", "sampler");
    (void)env;
    return *sampler_;
  }
  Napi::Value process(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      Sampler& sm = s(info.Env());
      Napi::Float32Array in = floats_arg(info, 0, sm.vocab());
      Napi::Float32Array out = Napi::Float32Array::New(info.Env(), in.ElementLength());
      std::copy(in.Data(), in.Data() + in.ElementLength(), out.Data());
      sm.process(out.Data());
      return out;
    });
  }
  Napi::Value distribution(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      Sampler& sm = s(info.Env());
      std::vector<float> p = sm.distribution(floats_arg(info, 0, sm.vocab()).Data());
      Napi::Float32Array out = Napi::Float32Array::New(info.Env(), p.size());
      std::copy(p.begin(), p.end(), out.Data());
      return out;
    });
  }
  Napi::Value sample(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      Sampler& sm = s(info.Env());
      return result_object(info.Env(), sm.sample(floats_arg(info, 0, sm.vocab()).Data()));
    });
  }
  Napi::Value accept(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      Sampler& sm = s(info.Env());
      std::vector<int32_t> ids = ids_arg(info.Length() > 0 ? info[0] : info.Env().Undefined(), "tokens");
      sm.accept(ids.data(), static_cast<int64_t>(ids.size()));
      return info.Env().Undefined();
    });
  }
  std::unique_ptr<Sampler> sampler_;
};

// --- GenerationSequence ----------------------------------------------------------------------
class SequenceWrap : public Napi::ObjectWrap<SequenceWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "GenerationSequence", {
      InstanceMethod<&SequenceWrap::prefill>("prefill"),
      InstanceMethod<&SequenceWrap::step>("step"),
      InstanceMethod<&SequenceWrap::steps>("steps"),
      InstanceMethod<&SequenceWrap::dispose>("dispose"),
      InstanceAccessor<&SequenceWrap::length>("length"),
    });
  }
  // new GenerationSequence(model, samplingOptions, maxTokens)
  explicit SequenceWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SequenceWrap>(info) {
    guarded(info.Env(), [&] {
      std::shared_ptr<Model> model = unwrap_model(info.Length() > 0 ? info[0] : info.Env().Undefined());
      SamplingParams p = parse_params(info.Length() > 1 ? info[1] : info.Env().Undefined());
      if (info.Length() < 3 || !info[2].IsNumber()) bad("maxTokens", "must be a number");
      double max_tokens = info[2].As<Napi::Number>().DoubleValue();
      if (!(max_tokens >= 1 && max_tokens <= (1 << 30)) || max_tokens != std::floor(max_tokens)) bad("maxTokens", "must be an integer >= 1");
      seq_ = std::make_shared<Sequence>(std::move(model), p, static_cast<int64_t>(max_tokens));
      return info.Env().Undefined();
    });
  }

 private:
  std::shared_ptr<Sequence> take(Napi::Env env) {
    if (!seq_) fail(ErrorCode::kInvalidArgument, "the sequence was disposed", "sequence");
    if (busy_->exchange(true)) fail(ErrorCode::kBusy, "a step of this sequence is already running", "sequence");
    (void)env;
    return seq_;
  }
  Napi::Value run(Napi::Env env, std::function<SampleResult(Sequence&)> fn) {
    auto seq = take(env);
    auto busy = busy_;
    auto out = std::make_shared<SampleResult>();
    return run_async(
        env,
        [seq, busy, out, fn]() {
          struct Clear { std::shared_ptr<std::atomic<bool>> b; ~Clear() { b->store(false); } } clear{busy};
          *out = fn(*seq);
        },
        [out](Napi::Env e) -> Napi::Value { return result_object(e, *out); });
  }
  Napi::Value prefill(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      auto ids = std::make_shared<std::vector<int32_t>>(ids_arg(info.Length() > 0 ? info[0] : info.Env().Undefined(), "input"));
      int64_t chunk = 512;
      if (info.Length() > 1 && info[1].IsNumber()) chunk = std::max<int64_t>(1, info[1].As<Napi::Number>().Int64Value());
      return run(info.Env(), [ids, chunk](Sequence& s) { return s.prefill(ids->data(), static_cast<int64_t>(ids->size()), chunk); });
    });
  }
  Napi::Value step(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      if (info.Length() < 1 || !info[0].IsNumber()) bad("token", "must be a number");
      int32_t token = info[0].As<Napi::Number>().Int32Value();
      return run(info.Env(), [token](Sequence& s) { return s.step(token); });
    });
  }
  // steps(token, count, stopIds?): up to `count` steps in one call (Sequence::steps).
  Napi::Value steps(const Napi::CallbackInfo& info) {
    return guarded(info.Env(), [&]() -> Napi::Value {
      if (info.Length() < 1 || !info[0].IsNumber()) bad("token", "must be a number");
      if (info.Length() < 2 || !info[1].IsNumber()) bad("count", "must be a number");
      const int32_t token = info[0].As<Napi::Number>().Int32Value();
      const double count = info[1].As<Napi::Number>().DoubleValue();
      if (!(count >= 1 && count <= 4096) || count != std::floor(count)) bad("count", "must be an integer in [1, 4096]");
      auto stop = std::make_shared<std::vector<int32_t>>();
      if (info.Length() > 2 && !info[2].IsUndefined()) *stop = ids_arg(info[2], "stopIds");
      std::sort(stop->begin(), stop->end());
      auto seq = take(info.Env());
      auto busy = busy_;
      auto out = std::make_shared<std::vector<SampleResult>>();
      const int64_t n = static_cast<int64_t>(count);
      return run_async(
          info.Env(),
          [seq, busy, out, token, n, stop]() {
            struct Clear { std::shared_ptr<std::atomic<bool>> b; ~Clear() { b->store(false); } } clear{busy};
            *out = seq->steps(token, n, *stop);
          },
          [out](Napi::Env e) -> Napi::Value {
            Napi::Array a = Napi::Array::New(e, out->size());
            for (size_t i = 0; i < out->size(); ++i) a.Set(static_cast<uint32_t>(i), result_object(e, (*out)[i]));
            return a;
          });
    });
  }
  // Drops this object's reference; a step still running keeps the state until it returns.
  Napi::Value dispose(const Napi::CallbackInfo& info) {
    seq_.reset();
    return info.Env().Undefined();
  }
  Napi::Value length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), seq_ ? static_cast<double>(seq_->length()) : 0.0);
  }

  std::shared_ptr<Sequence> seq_;
  std::shared_ptr<std::atomic<bool>> busy_ = std::make_shared<std::atomic<bool>>(false);
};

// createTableModel(table: Float32Array, vocab: number, delayMs?: number)
Napi::Value create_table_model(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    if (info.Length() < 2 || !info[1].IsNumber()) bad("vocab", "must be a number");
    int64_t vocab = info[1].As<Napi::Number>().Int64Value();
    if (vocab <= 0 || vocab > 65536) bad("vocab", "must be in [1, 65536]");
    Napi::Float32Array t = floats_arg(info, 0, vocab * vocab, "table");
    double delay = info.Length() > 2 && info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0.0;
    if (!(delay >= 0 && delay <= 10000)) bad("delayMs", "must be in [0, 10000]");
    Napi::Object o = Napi::Object::New(env);
    attach_model(o, make_table_model(std::vector<float>(t.Data(), t.Data() + t.ElementLength()), vocab, delay));
    o.Set("vocabSize", Napi::Number::New(env, static_cast<double>(vocab)));
    return o;
  });
}

// modelVocabSize(handle): the vocabulary of the model a handle carries (a cheap validity check).
Napi::Value model_vocab_size(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<Model> m = unwrap_model(info.Length() > 0 ? info[0] : env.Undefined());
    return Napi::Number::New(env, static_cast<double>(m->config().vocab_size));
  });
}

Napi::Value generation_stats(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("liveSequences", Napi::Number::New(info.Env(), static_cast<double>(Sequence::live())));
  return o;
}

void init(Napi::Env env, Napi::Object exports) {
  exports.Set("Sampler", SamplerWrap::define(env));
  exports.Set("GenerationSequence", SequenceWrap::define(env));
  exports.Set("createTableModel", Napi::Function::New(env, create_table_model));
  exports.Set("generationStats", Napi::Function::New(env, generation_stats));
  exports.Set("modelVocabSize", Napi::Function::New(env, model_vocab_size));
}

static Registrar reg(init);

}  // namespace

// Shared with cpp/addon/engine.cc (the engine reads the same sampling options).
SamplingParams parse_sampling_params(Napi::Value v) { return parse_params(v); }

}  // namespace mlxb::addon
