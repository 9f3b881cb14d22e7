// Module entry: collects every class file's exports, plus the error factory hook and build facts.
#include <vector>

#include "addon/util.h"
#include "core/thread_pool.h"
#include "ops/ops.h"

namespace mlxb::addon {

static std::vector<InitFn>& registry() {
  static std::vector<InitFn> r;
  return r;
}

Registrar::Registrar(InitFn fn) { registry().push_back(fn); }

static Napi::FunctionReference* g_error_factory = nullptr;

Napi::Error make_error(Napi::Env env, ErrorCode code, const std::string& message, const std::string& field) {
  if (g_error_factory) {
    Napi::Value v = g_error_factory->Call({Napi::String::New(env, error_code_name(code)), Napi::String::New(env, message),
                                           field.empty() ? env.Undefined() : Napi::String::New(env, field)});
    if (v.IsObject()) return Napi::Error(env, v);
  }
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", error_code_name(code));
  if (!field.empty()) e.Set("field", field);
  return e;
}

Napi::Error make_error(Napi::Env env, const std::exception& e) {
  if (auto* me = dynamic_cast<const Error*>(&e)) return make_error(env, me->code(), me->what(), me->field());
  if (dynamic_cast<const std::bad_alloc*>(&e)) return make_error(env, ErrorCode::kOutOfMemory, "out of memory");
  return make_error(env, ErrorCode::kInternal, e.what());
}

namespace {
class Worker : public Napi::AsyncWorker {
 public:
  Worker(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done)
      : Napi::AsyncWorker(env, "mlxb"), deferred_(Napi::Promise::Deferred::New(env)), work_(std::move(work)), done_(std::move(done)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      work_();
    } catch (const Error& e) {
      code_ = e.code(); field_ = e.field(); message_ = e.what(); failed_ = true;
    } catch (const std::bad_alloc&) {
      code_ = ErrorCode::kOutOfMemory; message_ = "out of memory"; failed_ = true;
    } catch (const std::exception& e) {
      code_ = ErrorCode::kInternal; message_ = e.what(); failed_ = true;
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    if (failed_) { deferred_.Reject(make_error(env, code_, message_, field_).Value()); return; }
    try {
      deferred_.Resolve(done_(env));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    } catch (const std::exception& e) {
      deferred_.Reject(make_error(env, e).Value());
    }
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::function<void()> work_;
  std::function<Napi::Value(Napi::Env)> done_;
  bool failed_ = false;
  ErrorCode code_ = ErrorCode::kInternal;
  std::string message_, field_;
};
}  // namespace

Napi::Promise run_async(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done) {
  auto* w = new Worker(env, std::move(work), std::move(done));
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

std::string arg_string(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsString()) throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

double arg_number(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a number");
  return info[i].As<Napi::Number>().DoubleValue();
}

Napi::Object arg_object(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsObject()) throw Napi::TypeError::New(info.Env(), std::string(name) + " must be an object");
  return info[i].As<Napi::Object>();
}

static Napi::Value set_error_factory(const Napi::CallbackInfo& info) {
  if (!info[0].IsFunction()) throw Napi::TypeError::New(info.Env(), "factory must be a function");
  delete g_error_factory;
  g_error_factory = new Napi::FunctionReference(Napi::Persistent(info[0].As<Napi::Function>()));
  return info.Env().Undefined();
}

static Napi::Value build_info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("cudaBuilt", cuda_built());
  o.Set("cudaAvailable", guarded(env, [&] { return Napi::Boolean::New(env, cuda_available()); }));
  o.Set("threads", num_threads());
  return o;
}

static Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("setErrorFactory", Napi::Function::New(env, set_error_factory));
  exports.Set("buildInfo", Napi::Function::New(env, build_info));
  for (InitFn fn : registry()) fn(env, exports);
  return exports;
}

}  // namespace mlxb::addon

static Napi::Object mlxb_init(Napi::Env env, Napi::Object exports) { return mlxb::addon::init(env, exports); }
NODE_API_MODULE(mlxb, mlxb_init)
