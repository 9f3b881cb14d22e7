// Node-API glue shared by the addon's class files: typed errors and promises run off the JS
// thread. Nothing below cpp/addon/ sees a Napi type.
#pragma once
#include <napi.h>

#include <functional>
#include <memory>
#include <string>

#include "core/error.h"

namespace mlxb::addon {

// Builds the JS error for a native failure through the factory lib/native registered
// (setErrorFactory), so JS sees its typed classes; falls back to a plain Error with `code`.
Napi::Error make_error(Napi::Env env, ErrorCode code, const std::string& message, const std::string& field = {});
Napi::Error make_error(Napi::Env env, const std::exception& e);

// Runs `fn` on the JS thread, turning native exceptions into thrown typed JS errors.
template <typename F>
Napi::Value guarded(Napi::Env env, F&& fn) {
  try {
    return fn();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    make_error(env, e).ThrowAsJavaScriptException();
    return env.Undefined();
  }
}

// Runs `work` on a libuv worker thread and settles a promise with `done(env)` on the JS thread.
// Exceptions from either reject the promise with a typed error.
Napi::Promise run_async(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done);

// Registration of exports: each class file defines one `static Registrar r(init_fn);`.
using InitFn = void (*)(Napi::Env, Napi::Object);
struct Registrar {
  explicit Registrar(InitFn fn);
};

// Argument helpers that throw a TypeError naming the argument.
std::string arg_string(const Napi::CallbackInfo& info, size_t i, const char* name);
double arg_number(const Napi::CallbackInfo& info, size_t i, const char* name);
Napi::Object arg_object(const Napi::CallbackInfo& info, size_t i, const char* name);

}  // namespace mlxb::addon
