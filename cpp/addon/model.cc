// JS classes of the models area: `loadModel(dir, options, onProgress?)` -> `NativeModel`
// (config, forward and pooled hidden states on a fresh cache, greedy decoding, sessions, dispose; it also carries the
// model for other areas through attach_model) and `NativeSession`
// (one sequence's caches for the incremental path: forward, reset, dispose). Loading and every
// forward run on worker threads; ids are copied off the JS heap before the work starts.
// Options arrive validated by lib/models; they are re-checked here.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "addon/config_js.h"
#include "addon/model_ref.h"
#include "addon/util.h"
#include "models/model.h"
#include "ops/ops.h"

namespace mlxb::addon {

namespace {

[[noreturn]] void bad_arg(const std::string& field, const std::string& what) {
  fail(ErrorCode::kInvalidArgument, field + " " + what, field);
}

// The model of one NativeModel object; null after dispose. Running work holds its own reference.
struct ModelSlot {
  std::mutex mu;
  std::shared_ptr<Model> model;
  std::shared_ptr<Model> get() {
    std::lock_guard<std::mutex> lock(mu);
    if (!model) fail(ErrorCode::kInvalidArgument, "the model was disposed", "model");
    return model;
  }
};

// One sequence's caches. `busy` while a forward runs; dispose while busy frees on completion.
struct SessionState {
  std::mutex mu;
  CacheSet caches;
  int64_t max_tokens = 0;
  bool busy = false;
  bool disposed = false;
  // On the JS thread when an async call's promise settles: the session is free again, and its
  // caches go now if it was disposed while the call ran.
  void settle() {
    std::lock_guard<std::mutex> lock(mu);
    busy = false;
    if (disposed) caches.clear();
  }
};

std::vector<int32_t> read_ids(const Napi::Value& v, const char* field) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    bad_arg(field, "must be an Int32Array");
  Napi::Int32Array a = v.As<Napi::Int32Array>();
  if (a.ElementLength() == 0) bad_arg(field, "must hold at least one token id");
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

int64_t read_count(const Napi::Value& v, const char* field, int64_t lo, int64_t hi) {
  if (!v.IsNumber()) bad_arg(field, "must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad_arg(field, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(d);
}

Napi::Float32Array to_js(Napi::Env env, const std::vector<float>& v) {
  Napi::Float32Array a = Napi::Float32Array::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(float));
  return a;
}

// The shared config form plus the two fields model handles have always reported this way.
Napi::Object config_to_js(Napi::Env env, const Model& m) {
  const ModelConfig& c = m.config();
  Napi::Object o = model_config_to_js(env, c);
  o.Set("torchDtype", c.torch_dtype);
  o.Set("quantized", c.quantization.has_value());
  return o;
}

class NativeSession : public Napi::ObjectWrap<NativeSession> {
 public:
  static Napi::FunctionReference* ctor;
  static void init(Napi::Env env) {
    Napi::Function f = DefineClass(env, "NativeSession",
                                   {InstanceMethod("forward", &NativeSession::forward), InstanceMethod("length", &NativeSession::length),
                                    InstanceMethod("reset", &NativeSession::reset), InstanceMethod("truncate", &NativeSession::truncate),
                                    InstanceMethod("saveState", &NativeSession::save_state), InstanceMethod("loadState", &NativeSession::load_state),
                                    InstanceMethod("dispose", &NativeSession::dispose)});
    ctor = new Napi::FunctionReference(Napi::Persistent(f));
  }
  explicit NativeSession(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeSession>(info) {}
  void bind(std::shared_ptr<ModelSlot> slot, std::shared_ptr<SessionState> state) {
    slot_ = std::move(slot);
    state_ = std::move(state);
  }

 private:
  std::shared_ptr<SessionState> bound() const {
    if (!state_ || (!slot_ && !state_->disposed)) fail(ErrorCode::kInvalidArgument, "session is not bound to a model", "session");
    return state_;
  }
  // Checks the state is usable for a call; the caller holds state_->mu.
  SessionState& usable() {
    if (state_->disposed) fail(ErrorCode::kInvalidArgument, "the session was disposed", "session");
    if (state_->busy) fail(ErrorCode::kBusy, "the session is running a forward; await it first", "session");
    return *state_;
  }

  Napi::Value forward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::vector<int32_t> ids = read_ids(info[0], "ids");
      const bool all_rows = info.Length() > 1 && info[1].ToBoolean().Value();
      std::shared_ptr<SessionState> st = bound();
      std::shared_ptr<Model> model;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        SessionState& s = usable();
        model = slot_->get();
        const int64_t len = s.caches.empty() ? 0 : s.caches[0]->length();
        if (len + static_cast<int64_t>(ids.size()) > s.max_tokens)
          fail(ErrorCode::kInvalidArgument, "session holds " + std::to_string(len) + " tokens; " + std::to_string(ids.size()) +
                                                " more exceed its maxTokens of " + std::to_string(s.max_tokens), "ids");
        s.busy = true;
      }
      // `busy` is cleared on the JS thread when the promise settles (not when the worker
      // finishes), so a second call before the first one's await is always refused.
      auto out = std::make_shared<std::vector<float>>();
      auto err = std::make_shared<std::exception_ptr>();
      return run_async(
          env,
          [model, st, ids = std::move(ids), all_rows, out, err]() {
            try {
              const int64_t t = static_cast<int64_t>(ids.size());
              out->resize(static_cast<size_t>((all_rows ? t : 1) * model->config().vocab_size));
              model->forward(ids.data(), t, st->caches, out->data(), all_rows);
            } catch (...) {
              *err = std::current_exception();
            }
          },
          [st, out, err](Napi::Env e) -> Napi::Value {
            st->settle();
            if (*err) std::rethrow_exception(*err);
            return to_js(e, *out);
          });
    });
  }

  Napi::Value length(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<SessionState> st = bound();
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->disposed) fail(ErrorCode::kInvalidArgument, "the session was disposed", "session");
      return Napi::Number::New(env, state_->caches.empty() ? 0.0 : static_cast<double>(state_->caches[0]->length()));
    });
  }

  Napi::Value reset(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<SessionState> st = bound();
      std::lock_guard<std::mutex> lock(st->mu);
      SessionState& s = usable();
      for (auto& c : s.caches) c->reset();
      return env.Undefined();
    });
  }

  // Every layer's keys and values of the tokens held, as host bytes ([Hkv, length, D] each, the
  // cache dtype), read on a worker thread.
  Napi::Value save_state(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<SessionState> st = bound();
      std::shared_ptr<Model> model;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        SessionState& s = usable();
        model = slot_->get();
        s.busy = true;
      }
      auto out = std::make_shared<std::vector<std::pair<Tensor, Tensor>>>();
      auto err = std::make_shared<std::exception_ptr>();
      return run_async(
          env,
          [st, out, err]() {
            try {
              for (const auto& c : st->caches) {
                Tensor k, v;
                if (!c->save_state(k, v))
                  fail(ErrorCode::kUnsupported, "this model's KV cache cannot be saved (sliding-window layers keep only their window)", "session");
                out->emplace_back(std::move(k), std::move(v));
              }
            } catch (...) {
              *err = std::current_exception();
            }
          },
          [st, out, err, model](Napi::Env e) -> Napi::Value {
            st->settle();
            if (*err) std::rethrow_exception(*err);
            Napi::Array layers = Napi::Array::New(e, out->size());
            std::string dtype = "float32";
            int64_t length = 0;
            for (size_t i = 0; i < out->size(); ++i) {
              Napi::Object o = Napi::Object::New(e);
              const auto& [k, v] = (*out)[i];
              dtype = dtype_name(k.dtype());
              length = k.dim(1);
              Napi::ArrayBuffer kb = Napi::ArrayBuffer::New(e, static_cast<size_t>(k.nbytes()));
              Napi::ArrayBuffer vb = Napi::ArrayBuffer::New(e, static_cast<size_t>(v.nbytes()));
              if (k.nbytes() > 0) std::memcpy(kb.Data(), k.data(), static_cast<size_t>(k.nbytes()));
              if (v.nbytes() > 0) std::memcpy(vb.Data(), v.data(), static_cast<size_t>(v.nbytes()));
              o.Set("k", kb);
              o.Set("v", vb);
              layers[i] = o;
            }
            Napi::Object r = Napi::Object::New(e);
            r.Set("length", static_cast<double>(length));
            r.Set("dtype", dtype);
            r.Set("kvHeads", static_cast<double>(model->config().num_kv_heads));
            r.Set("headDim", static_cast<double>(model->config().head_dim));
            r.Set("layers", layers);
            return r;
          });
    });
  }

  // Replaces the caches with saved keys/values (saveState's form): every layer's bytes are
  // checked first; a cache that refuses them leaves the session empty.
  Napi::Value load_state(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<SessionState> st = bound();
      std::lock_guard<std::mutex> lock(st->mu);
      SessionState& s = usable();
      std::shared_ptr<Model> model = slot_->get();
      if (!info[0].IsArray()) bad_arg("layers", "must be an array");
      Napi::Array layers = info[0].As<Napi::Array>();
      const int64_t n = read_count(info[1], "length", 0, s.max_tokens);
      const std::string dname = info.Length() > 2 && info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "";
      DType dt;
      if (dname == "float32") dt = DType::F32;
      else if (dname == "bfloat16") dt = DType::BF16;
      else if (dname == "float16") dt = DType::F16;
      else bad_arg("dtype", "must be 'float32', 'bfloat16' or 'float16'");
      if (layers.Length() != s.caches.size())
        bad_arg("layers", "holds " + std::to_string(layers.Length()) + " layers; the model has " + std::to_string(s.caches.size()));
      const ModelConfig& c = model->config();
      const int64_t bytes = c.num_kv_heads * n * c.head_dim * dtype_size(dt);
      std::vector<std::pair<Tensor, Tensor>> host;
      for (uint32_t i = 0; i < layers.Length(); ++i) {
        Napi::Value lv = layers[i];
        if (!lv.IsObject()) bad_arg("layers", "entries must be { k, v } objects");
        Napi::Object o = lv.As<Napi::Object>();
        Tensor kv[2];
        for (int j = 0; j < 2; ++j) {
          Napi::Value b = o.Get(j == 0 ? "k" : "v");
          if (!b.IsTypedArray() || b.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) bad_arg("layers", "k and v must be Uint8Arrays");
          Napi::Uint8Array a = b.As<Napi::Uint8Array>();
          if (static_cast<int64_t>(a.ByteLength()) != bytes)
            bad_arg("layers", "layer " + std::to_string(i) + " holds " + std::to_string(a.ByteLength()) + " bytes; " + std::to_string(bytes) + " expected");
          kv[j] = Tensor::empty({c.num_kv_heads, n, c.head_dim}, dt, Device::kCPU);
          if (bytes > 0) std::memcpy(kv[j].data(), a.Data(), static_cast<size_t>(bytes));
        }
        host.emplace_back(std::move(kv[0]), std::move(kv[1]));
      }
      try {
        for (size_t i = 0; i < s.caches.size(); ++i)
          if (!s.caches[i]->load_state(host[i].first, host[i].second))
            fail(ErrorCode::kUnsupported, "this model's KV cache cannot be restored (sliding-window layers keep only their window)", "session");
      } catch (...) {
        for (auto& cache : s.caches) cache->reset();
        throw;
      }
      return env.Undefined();
    });
  }

  // Keeps the first `length` tokens (0 <= length <= length()); every layer's cache is checked
  // first, so a cache that cannot (a sliding window) leaves the session as it was.
  Napi::Value truncate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<SessionState> st = bound();
      std::lock_guard<std::mutex> lock(st->mu);
      SessionState& s = usable();
      const int64_t len = s.caches.empty() ? 0 : s.caches[0]->length();
      const int64_t to = read_count(info[0], "length", 0, len);
      for (const auto& c : s.caches)
        if (!c->can_truncate(to))
          fail(ErrorCode::kUnsupported, "this model's KV cache cannot be truncated (sliding-window layers keep only their window)", "session");
      for (auto& c : s.caches) c->truncate(to);
      return env.Undefined();
    });
  }

  Napi::Value dispose(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (state_) {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->disposed = true;
      if (!state_->busy) state_->caches.clear();
    }
    slot_.reset();
    return env.Undefined();
  }

  std::shared_ptr<ModelSlot> slot_;
  std::shared_ptr<SessionState> state_;
};
Napi::FunctionReference* NativeSession::ctor = nullptr;

class NativeModel : public Napi::ObjectWrap<NativeModel> {
 public:
  static Napi::FunctionReference* ctor;
  static void init(Napi::Env env) {
    Napi::Function f = DefineClass(
        env, "NativeModel",
        {InstanceMethod("config", &NativeModel::config), InstanceMethod("info", &NativeModel::info),
         InstanceMethod("forward", &NativeModel::forward), InstanceMethod("hidden", &NativeModel::hidden),
         InstanceMethod("greedy", &NativeModel::greedy),
         InstanceMethod("createSession", &NativeModel::create_session), InstanceMethod("dispose", &NativeModel::dispose)});
    ctor = new Napi::FunctionReference(Napi::Persistent(f));
  }
  explicit NativeModel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeModel>(info) {}
  void bind(std::shared_ptr<Model> m) {
    slot_ = std::make_shared<ModelSlot>();
    slot_->model = std::move(m);
  }

 private:
  Napi::Value config(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value { return config_to_js(env, *slot_->get()); });
  }

  Napi::Value info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<Model> m = slot_->get();
      Napi::Object o = Napi::Object::New(env);
      o.Set("device", device_name(m->device()));
      o.Set("weightBytes", static_cast<double>(m->weight_bytes()));
      GraphCapabilities caps = m->capabilities();
      o.Set("slidingWindow", caps.sliding_window);
      o.Set("logitSoftcap", caps.logit_softcap);
      return o;
    });
  }

  // Logits of `ids` on a fresh cache: [T, vocab] when allRows, else [1, vocab] (last token).
  Napi::Value forward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::vector<int32_t> ids = read_ids(info[0], "ids");
      const bool all_rows = info.Length() > 1 && info[1].ToBoolean().Value();
      std::shared_ptr<Model> model = slot_->get();
      auto out = std::make_shared<std::vector<float>>();
      return run_async(
          env,
          [model, ids = std::move(ids), all_rows, out]() {
            const int64_t t = static_cast<int64_t>(ids.size());
            CacheSet caches = model->make_caches(t);
            out->resize(static_cast<size_t>((all_rows ? t : 1) * model->config().vocab_size));
            model->forward(ids.data(), t, caches, out->data(), all_rows);
          },
          [out](Napi::Env e) -> Napi::Value { return to_js(e, *out); });
    });
  }

  // Final hidden states of `ids` on a fresh cache, pooled: 'last' -> [hidden] (the last token's),
  // 'mean' -> [hidden] (the average over the tokens, summed in double), 'none' -> [T, hidden].
  Napi::Value hidden(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::vector<int32_t> ids = read_ids(info[0], "ids");
      const std::string pooling = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
      if (pooling != "last" && pooling != "mean" && pooling != "none")
        bad_arg("pooling", "must be 'last', 'mean' or 'none'");
      std::shared_ptr<Model> model = slot_->get();
      auto out = std::make_shared<std::vector<float>>();
      return run_async(
          env,
          [model, ids = std::move(ids), pooling, out]() {
            const int64_t t = static_cast<int64_t>(ids.size()), h = model->config().hidden_size;
            const bool all_rows = pooling != "last";
            CacheSet caches = model->make_caches(t);
            out->resize(static_cast<size_t>((all_rows ? t : 1) * h));
            model->forward_hidden(ids.data(), t, caches, out->data(), all_rows);
            if (pooling != "mean") return;
            std::vector<double> sum(static_cast<size_t>(h), 0.0);
            for (int64_t r = 0; r < t; ++r)
              for (int64_t j = 0; j < h; ++j) sum[static_cast<size_t>(j)] += (*out)[static_cast<size_t>(r * h + j)];
            out->resize(static_cast<size_t>(h));
            for (int64_t j = 0; j < h; ++j) (*out)[static_cast<size_t>(j)] = static_cast<float>(sum[static_cast<size_t>(j)] / static_cast<double>(t));
          },
          [out](Napi::Env e) -> Napi::Value { return to_js(e, *out); });
    });
  }

  // Greedy continuation: prefill `ids`, then n-1 single-token steps on the same caches.
  Napi::Value greedy(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      std::vector<int32_t> ids = read_ids(info[0], "ids");
      const int64_t n = read_count(info[1], "n", 0, int64_t{1} << 24);
      std::shared_ptr<Model> model = slot_->get();
      auto toks = std::make_shared<std::vector<int32_t>>();
      return run_async(
          env,
          [model, ids = std::move(ids), n, toks]() {
            if (n == 0) return;
            const int64_t t = static_cast<int64_t>(ids.size());
            CacheSet caches = model->make_caches(t + n);
            toks->resize(static_cast<size_t>(n));
            (*toks)[0] = model->forward_argmax(ids.data(), t, caches);
            if (n > 1) model->greedy_steps((*toks)[0], n - 1, caches, toks->data() + 1);
          },
          [toks](Napi::Env e) -> Napi::Value {
            Napi::Int32Array a = Napi::Int32Array::New(e, toks->size());
            if (!toks->empty()) std::memcpy(a.Data(), toks->data(), toks->size() * sizeof(int32_t));
            return a;
          });
    });
  }

  Napi::Value create_session(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      const int64_t max_tokens = read_count(info[0], "maxTokens", 1, int64_t{1} << 30);
      std::shared_ptr<Model> model = slot_->get();
      auto st = std::make_shared<SessionState>();
      st->max_tokens = max_tokens;
      st->caches = model->make_caches(max_tokens);
      Napi::Object obj = NativeSession::ctor->New({});
      NativeSession::Unwrap(obj)->bind(slot_, st);
      return obj;
    });
  }

  Napi::Value dispose(const Napi::CallbackInfo& info) {
    if (slot_) {
      std::lock_guard<std::mutex> lock(slot_->mu);
      slot_->model.reset();
    }
    detach_model(info.This().As<Napi::Object>());
    return info.Env().Undefined();
  }

  std::shared_ptr<ModelSlot> slot_ = std::make_shared<ModelSlot>();
};
Napi::FunctionReference* NativeModel::ctor = nullptr;

struct Progress {
  Napi::ThreadSafeFunction tsfn;
  bool active = false;
  std::mutex mu;
  double last = -1.0;
  std::string last_phase;
};

Napi::Value load_model_js(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    const std::string dir = arg_string(info, 0, "dir");
    LoadOptions opt;
    Napi::Object o = info.Length() > 1 && info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(env);
    const std::string device = o.Get("device").IsString() ? o.Get("device").As<Napi::String>().Utf8Value() : "cpu";
    if (device == "cpu") opt.device = Device::kCPU;
    else if (device == "cuda") opt.device = Device::kCUDA;
    else bad_arg("device", "must be 'cpu' or 'cuda', got '" + device + "'");
    if (opt.device == Device::kCUDA && !cuda_built())
      fail(ErrorCode::kNotBuilt, "this build of the addon has no CUDA backend", "device");
    if (opt.device == Device::kCUDA && !cuda_available())
      fail(ErrorCode::kUnsupported, "no CUDA device is available on this machine", "device");
    const std::string dtype = o.Get("dtype").IsString() ? o.Get("dtype").As<Napi::String>().Utf8Value() : "auto";
    opt.auto_dtype = dtype == "auto";
    if (dtype == "float32") opt.dtype = DType::F32;
    else if (dtype == "bfloat16") opt.dtype = DType::BF16;
    else if (dtype == "float16") opt.dtype = DType::F16;
    else if (dtype != "auto") bad_arg("dtype", "must be 'float32', 'bfloat16', 'float16' or 'auto', got '" + dtype + "'");

    auto progress = std::make_shared<Progress>();
    if (info.Length() > 2 && info[2].IsFunction()) {
      progress->tsfn = Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "mlxb-load-progress", 0, 1);
      progress->active = true;
      opt.progress = [progress](double f, const char* phase) {
        std::lock_guard<std::mutex> lock(progress->mu);
        if (phase == progress->last_phase && f < progress->last + 0.01 && f < 1.0) return;  // throttle to 1 %
        progress->last = f;
        progress->last_phase = phase;
        auto* data = new std::pair<double, std::string>(f, phase);
        napi_status st = progress->tsfn.NonBlockingCall(data, [](Napi::Env e, Napi::Function cb, std::pair<double, std::string>* d) {
          cb.Call({Napi::Number::New(e, d->first), Napi::String::New(e, d->second)});
          delete d;
        });
        if (st != napi_ok) delete data;
      };
    }
    auto result = std::make_shared<std::shared_ptr<Model>>();
    return run_async(
        env,
        [dir, opt, progress, result]() {
          struct Release {
            Progress& p;
            ~Release() { if (p.active) p.tsfn.Release(); }
          } release{*progress};
          *result = std::shared_ptr<Model>(load_model(dir, opt));
        },
        [result](Napi::Env e) -> Napi::Value {
          Napi::Object obj = NativeModel::ctor->New({});
          attach_model(obj, *result);  // generation and other areas find the model through model_ref.h
          NativeModel::Unwrap(obj)->bind(std::move(*result));
          return obj;
        });
  });
}

void init(Napi::Env env, Napi::Object exports) {
  NativeSession::init(env);
  NativeModel::init(env);
  exports.Set("loadModel", Napi::Function::New(env, load_model_js));
}

Registrar reg(init);

}  // namespace

}  // namespace mlxb::addon
