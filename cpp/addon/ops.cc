// Op runner for tests and microbenchmarks: runOp / timeOp run any op of ops.h on any device from
// plain typed arrays, and cpuFeatures reports the SIMD level the CPU kernels use. Inputs are
// copied off the JS heap on the JS thread; the op runs on a worker thread.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <vector>

#include "addon/util.h"
#include "core/cpu_features.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace mlxb::addon {
namespace {

struct HostInput {
  Tensor host;
};

DType parse_dtype(Napi::Env env, const std::string& s) {
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16") return DType::F16;
  if (s == "int32") return DType::I32;
  throw make_error(env, ErrorCode::kInvalidArgument, "unknown dtype '" + s + "'", "dtype");
}

const char* js_dtype(DType t) { return dtype_name(t); }

Tensor read_tensor(Napi::Env env, const std::string& name, Napi::Value v) {
  if (!v.IsObject()) throw make_error(env, ErrorCode::kInvalidArgument, "input '" + name + "' must be an object", name);
  Napi::Object o = v.As<Napi::Object>();
  DType dt = parse_dtype(env, o.Get("dtype").IsString() ? o.Get("dtype").As<Napi::String>().Utf8Value() : "");
  Napi::Value sv = o.Get("shape");
  if (!sv.IsArray()) throw make_error(env, ErrorCode::kInvalidArgument, "input '" + name + "' needs a shape array", name);
  Napi::Array sa = sv.As<Napi::Array>();
  Shape shape;
  int64_t n = 1;
  for (uint32_t i = 0; i < sa.Length(); ++i) {
    Napi::Value d = sa.Get(i);
    double x = d.IsNumber() ? d.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0) || x != std::floor(x) || x > 1e12)
      throw make_error(env, ErrorCode::kInvalidArgument, "input '" + name + "' has a bad shape entry", name);
    shape.push_back(static_cast<int64_t>(x));
    n = checked_mul(n, shape.back(), "input shape");
  }
  Napi::Value dv = o.Get("data");
  if (!dv.IsTypedArray()) throw make_error(env, ErrorCode::kInvalidArgument, "input '" + name + "' data must be a typed array", name);
  Napi::TypedArray ta = dv.As<Napi::TypedArray>();
  napi_typedarray_type want = dt == DType::F32 ? napi_float32_array : dt == DType::I32 ? napi_int32_array : napi_uint16_array;
  if (ta.TypedArrayType() != want)
    throw make_error(env, ErrorCode::kInvalidArgument,
                     "input '" + name + "' data must be a " +
                         (dt == DType::F32 ? "Float32Array" : dt == DType::I32 ? "Int32Array" : "Uint16Array") + " for " + dtype_name(dt),
                     name);
  if (static_cast<int64_t>(ta.ElementLength()) != n)
    throw make_error(env, ErrorCode::kInvalidArgument,
                     "input '" + name + "' has " + std::to_string(ta.ElementLength()) + " elements, shape says " + std::to_string(n), name);
  Tensor t = Tensor::empty(shape, dt);
  const char* src = static_cast<const char*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  if (n > 0) std::memcpy(t.data(), src, static_cast<size_t>(t.nbytes()));
  return t;
}

// Plain-data parameters of one call.
struct Params {
  std::map<std::string, double> num;
  std::map<std::string, std::string> str;
  double get(const std::string& k, double dflt) const {
    auto it = num.find(k);
    return it == num.end() ? dflt : it->second;
  }
  bool has(const std::string& k) const { return num.count(k) || str.count(k); }
  std::string get_str(const std::string& k, const std::string& dflt) const {
    auto it = str.find(k);
    return it == str.end() ? dflt : it->second;
  }
};

Params read_params(Napi::Env env, Napi::Value v) {
  Params p;
  if (v.IsUndefined() || v.IsNull()) return p;
  if (!v.IsObject()) throw make_error(env, ErrorCode::kInvalidArgument, "params must be an object", "params");
  Napi::Object o = v.As<Napi::Object>();
  Napi::Array keys = o.GetPropertyNames();
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
    Napi::Value x = o.Get(k);
    if (x.IsNumber()) p.num[k] = x.As<Napi::Number>().DoubleValue();
    else if (x.IsBoolean()) p.num[k] = x.As<Napi::Boolean>().Value() ? 1.0 : 0.0;
    else if (x.IsString()) p.str[k] = x.As<Napi::String>().Utf8Value();
    else if (!x.IsUndefined()) throw make_error(env, ErrorCode::kInvalidArgument, "param '" + k + "' must be a number, boolean or string", k);
  }
  return p;
}

// One prepared call: device tensors built on the worker thread, then `run` repeated.
class OpCall {
 public:
  OpCall(std::string name, Device dev, std::map<std::string, Tensor> host, Params params)
      : name_(std::move(name)), dev_(dev), host_(std::move(host)), p_(std::move(params)) {}

  void prepare() {
    for (auto& [k, t] : host_) {
      if (k == "k" || k == "v" || k == "cache") dev_in_[k] = padded_cache(t);
      else dev_in_[k] = t.to(dev_);
    }
    out_ = make_output();
  }

  void run() {
    const std::string& n = name_;
    if (n == "matmul") {
      ops::matmul(in("x"), in("w"), opt("bias"), out_);
    } else if (n == "embedding") {
      ops::embedding(in("table"), in("ids"), static_cast<float>(p_.get("scale", 1.0)), out_);
    } else if (n == "rms_norm") {
      ops::rms_norm(in("x"), in("w"), static_cast<float>(p_.get("eps", 1e-6)), p_.get("addOne", 0) != 0, out_);
    } else if (n == "layer_norm") {
      ops::layer_norm(in("x"), in("w"), opt("b"), static_cast<float>(p_.get("eps", 1e-5)), out_);
    } else if (n == "rope") {
      RopeArgs a;
      a.inv_freq = in("invFreq");
      a.rot_dim = static_cast<int64_t>(p_.get("rotDim", static_cast<double>(a.inv_freq.numel() * 2)));
      a.interleaved = p_.get("interleaved", 0) != 0;
      a.mscale = static_cast<float>(p_.get("mscale", 1.0));
      ops::rope(out_, in("positions"), a);
    } else if (n == "softmax") {
      ops::softmax(in("x"), out_);
    } else if (n == "attention") {
      AttentionArgs a;
      a.scale = static_cast<float>(p_.get("scale", 1.0 / std::sqrt(static_cast<double>(in("q").dim(-1)))));
      a.softcap = static_cast<float>(p_.get("softcap", 0.0));
      a.window = static_cast<int64_t>(p_.get("window", 0));
      a.causal = p_.get("causal", 1) != 0;
      ops::attention(in("q"), in("k"), in("v"), in("qPos"), in("kPos"), a, out_);
    } else if (n == "gated_act") {
      ops::gated_act(in("gate"), in("up"), parse_act(p_.get_str("act", "silu")), out_);
    } else if (n == "rms_scaled_gated_act") {
      ops::rms_scaled_gated_act(in("h"), in("x"), static_cast<float>(p_.get("eps", 1e-6)), parse_act(p_.get_str("act", "silu")), out_);
    } else if (n == "matmul_accumulate") {
      ops::matmul_accumulate(in("x"), in("w"), out_);
    } else if (n == "add") {
      ops::add(in("a"), in("b"), out_);
    } else if (n == "softcap") {
      ops::softcap(out_, static_cast<float>(p_.get("cap", 1.0)));
    } else if (n == "kv_write") {
      ops::kv_write(in("src"), in("slots"), out_);
    } else if (n == "convert") {
      ops::convert(in("src"), out_);
    } else {
      fail(ErrorCode::kInvalidArgument, "unknown op '" + n + "'", "name");
    }
  }

  static Activation parse_act(const std::string& act) {
    if (act != "silu" && act != "gelu" && act != "gelu_tanh") fail(ErrorCode::kInvalidArgument, "unknown act '" + act + "'", "act");
    return act == "silu" ? Activation::kSiLU : act == "gelu" ? Activation::kGeluExact : Activation::kGeluTanh;
  }

  void sync() { backend(dev_).synchronize(); }

  // Restores in-place outputs (rope, softcap, kv_write) between timed repetitions.
  void reset_inplace() {
    if (name_ == "rope") out_.copy_from(dev_in_.at("x"));
    if (name_ == "softcap") out_.copy_from(dev_in_.at("x"));
    if (name_ == "matmul_accumulate") out_.copy_from(dev_in_.at("resid"));
  }

  Tensor result() const {
    if (name_ == "kv_write") {  // the padded cache comes back unpadded
      const Tensor& c = out_;
      Tensor host = Tensor::empty(c.shape(), c.dtype());
      Tensor full = Tensor(c.storage(), 0, c.dtype(), {static_cast<int64_t>(c.storage()->bytes / dtype_size(c.dtype()))}).to(Device::kCPU);
      const int64_t h = c.dim(0), s = c.dim(1), d = c.dim(2), st = c.stride(0), es = dtype_size(c.dtype());
      for (int64_t i = 0; i < h; ++i)
        std::memcpy(static_cast<char*>(host.data()) + i * s * d * es, static_cast<const char*>(full.data()) + i * st * es,
                    static_cast<size_t>(s * d * es));
      return host;
    }
    return out_.to(Device::kCPU);
  }

 private:
  const Tensor& in(const std::string& k) const {
    auto it = dev_in_.find(k);
    if (it == dev_in_.end()) fail(ErrorCode::kInvalidArgument, name_ + " needs input '" + k + "'", k);
    return it->second;
  }
  const Tensor* opt(const std::string& k) const {
    auto it = dev_in_.find(k);
    return it == dev_in_.end() ? nullptr : &it->second;
  }

  // A cache input [H, S, D] placed in storage of [H, cap, D] (cap = params.kvCapacity >= S),
  // the padding filled with NaN so a kernel reading past S shows up in the result.
  Tensor padded_cache(const Tensor& t) {
    if (t.ndim() != 3) return t.to(dev_);
    const int64_t h = t.dim(0), s = t.dim(1), d = t.dim(2);
    const int64_t cap = std::max<int64_t>(s, static_cast<int64_t>(p_.get("kvCapacity", 0)));
    Tensor host = Tensor::empty({h, cap, d}, t.dtype());
    const int64_t es = dtype_size(t.dtype());
    std::vector<char> nan(static_cast<size_t>(es));
    if (t.dtype() == DType::F32) { float f = NAN; std::memcpy(nan.data(), &f, 4); }
    else if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) { uint16_t u = 0x7e00; std::memcpy(nan.data(), &u, 2); if (t.dtype() == DType::BF16) { u = 0x7fc0; std::memcpy(nan.data(), &u, 2); } }
    char* dst = static_cast<char*>(host.data());
    for (int64_t i = 0; i < h * cap * d; ++i) std::memcpy(dst + i * es, nan.data(), static_cast<size_t>(es));
    for (int64_t i = 0; i < h; ++i)
      std::memcpy(dst + i * cap * d * es, static_cast<const char*>(t.data()) + i * s * d * es, static_cast<size_t>(s * d * es));
    Tensor dev = host.to(dev_);
    return dev.as_strided({h, s, d}, {cap * d, d, 1}, 0);
  }

  DType out_dtype(DType dflt) const {
    std::string s = p_.get_str("outDtype", "");
    if (s.empty()) return dflt;
    if (s == "float32") return DType::F32;
    if (s == "bfloat16") return DType::BF16;
    if (s == "float16") return DType::F16;
    fail(ErrorCode::kInvalidArgument, "unknown outDtype '" + s + "'", "outDtype");
  }

  Tensor make_output() {
    const std::string& n = name_;
    if (n == "matmul") {
      Shape s = in("x").shape();
      if (s.empty()) fail(ErrorCode::kInvalidArgument, "matmul: x needs a shape", "x");
      s.back() = in("w").ndim() == 2 ? in("w").dim(0) : 0;
      return Tensor::empty(s, out_dtype(in("x").dtype()), dev_);
    }
    if (n == "embedding") {
      const Tensor& t = in("table");
      return Tensor::empty({in("ids").numel(), t.ndim() == 2 ? t.dim(1) : 0}, out_dtype(DType::F32), dev_);
    }
    if (n == "rms_norm" || n == "layer_norm" || n == "softmax") return Tensor::empty(in("x").shape(), out_dtype(in("x").dtype()), dev_);
    if (n == "rope" || n == "softcap") {
      Tensor t = Tensor::empty(in("x").shape(), in("x").dtype(), dev_);
      t.copy_from(in("x"));
      return t;
    }
    if (n == "attention") {
      const Tensor& q = in("q");
      const Tensor& v = in("v");
      return Tensor::empty({q.ndim() == 3 ? q.dim(0) : 0, q.ndim() == 3 ? q.dim(1) : 0, v.ndim() == 3 ? v.dim(2) : 0},
                           out_dtype(q.dtype()), dev_);
    }
    if (n == "gated_act") return Tensor::empty(in("gate").shape(), out_dtype(in("gate").dtype()), dev_);
    if (n == "rms_scaled_gated_act") {
      const Tensor& h = in("h");
      return Tensor::empty({h.ndim() == 2 ? h.dim(0) : 0, h.ndim() == 2 ? h.dim(1) / 2 : 0}, out_dtype(h.dtype()), dev_);
    }
    if (n == "matmul_accumulate") {  // accumulates into a copy of `resid`
      Tensor t = Tensor::empty(in("resid").shape(), in("resid").dtype(), dev_);
      t.copy_from(in("resid"));
      return t;
    }
    if (n == "add") return Tensor::empty(in("a").shape(), out_dtype(in("a").dtype()), dev_);
    if (n == "kv_write") return in("cache");
    if (n == "convert") return Tensor::empty(in("src").shape(), out_dtype(in("src").dtype()), dev_);
    fail(ErrorCode::kInvalidArgument, "unknown op '" + n + "'", "name");
  }

  std::string name_;
  Device dev_;
  std::map<std::string, Tensor> host_;
  Params p_;
  std::map<std::string, Tensor> dev_in_;
  Tensor out_;
};

Napi::Value to_js(Napi::Env env, const Tensor& t) {
  Napi::Object o = Napi::Object::New(env);
  const int64_t n = t.numel();
  Napi::Value data;
  if (t.dtype() == DType::F32) {
    auto a = Napi::Float32Array::New(env, static_cast<size_t>(n));
    if (n) std::memcpy(a.Data(), t.data(), static_cast<size_t>(t.nbytes()));
    data = a;
  } else if (t.dtype() == DType::I32) {
    auto a = Napi::Int32Array::New(env, static_cast<size_t>(n));
    if (n) std::memcpy(a.Data(), t.data(), static_cast<size_t>(t.nbytes()));
    data = a;
  } else {
    auto a = Napi::Uint16Array::New(env, static_cast<size_t>(n));
    if (n) std::memcpy(a.Data(), t.data(), static_cast<size_t>(t.nbytes()));
    data = a;
  }
  Napi::Array shape = Napi::Array::New(env, t.shape().size());
  for (size_t i = 0; i < t.shape().size(); ++i) shape.Set(static_cast<uint32_t>(i), static_cast<double>(t.shape()[i]));
  o.Set("data", data);
  o.Set("shape", shape);
  o.Set("dtype", js_dtype(t.dtype()));
  return o;
}

std::shared_ptr<OpCall> read_call(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = arg_string(info, 0, "name");
  std::string dev = arg_string(info, 1, "device");
  if (dev != "cpu" && dev != "cuda") throw make_error(env, ErrorCode::kInvalidArgument, "device must be 'cpu' or 'cuda'", "device");
  Napi::Object inputs = arg_object(info, 2, "inputs");
  std::map<std::string, Tensor> host;
  Napi::Array keys = inputs.GetPropertyNames();
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
    host[k] = read_tensor(env, k, inputs.Get(k));
  }
  Params p = read_params(env, info.Length() > 3 ? info[3] : env.Undefined());
  return std::make_shared<OpCall>(name, dev == "cpu" ? Device::kCPU : Device::kCUDA, std::move(host), std::move(p));
}

// Argument errors reject the returned promise (the API is async throughout).
template <typename F>
Napi::Value rejecting(Napi::Env env, F&& fn) {
  try {
    return fn();
  } catch (const Napi::Error& e) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Reject(e.Value());
    return d.Promise();
  } catch (const std::exception& e) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Reject(make_error(env, e).Value());
    return d.Promise();
  }
}

Napi::Value run_op(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return rejecting(env, [&]() -> Napi::Value {
    auto call = read_call(info);
    auto result = std::make_shared<Tensor>();
    return run_async(
        env,
        [call, result] {
          call->prepare();
          call->run();
          call->sync();
          *result = call->result();
        },
        [result](Napi::Env e) { return to_js(e, *result); });
  });
}

// CPU time of the whole process (all threads): on a busy machine, work per CPU-second says more
// about a kernel than wall time does.
double process_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

Napi::Value time_op(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return rejecting(env, [&]() -> Napi::Value {
    auto call = read_call(info);
    const double iters_d = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 10;
    const int iters = static_cast<int>(std::min(100000.0, std::max(1.0, iters_d)));
    auto times = std::make_shared<std::vector<double>>();
    auto cpu_times = std::make_shared<std::vector<double>>();
    return run_async(
        env,
        [call, times, cpu_times, iters] {
          call->prepare();
          call->run();
          call->sync();
          for (int i = 0; i < iters; ++i) {
            call->reset_inplace();
            const double c0 = process_cpu_ms();
            auto t0 = std::chrono::steady_clock::now();
            call->run();
            call->sync();
            auto t1 = std::chrono::steady_clock::now();
            cpu_times->push_back(process_cpu_ms() - c0);
            times->push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          }
          std::sort(times->begin(), times->end());
          std::sort(cpu_times->begin(), cpu_times->end());
        },
        [times, cpu_times](Napi::Env e) -> Napi::Value {
          Napi::Object o = Napi::Object::New(e);
          o.Set("cpuMsMedian", (*cpu_times)[cpu_times->size() / 2]);
          o.Set("msMedian", (*times)[times->size() / 2]);
          o.Set("msMin", times->front());
          o.Set("iters", static_cast<double>(times->size()));
          return o;
        });
  });
}

Napi::Value cpu_features_js(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CpuFeatures& f = cpu_features();
  Napi::Object o = Napi::Object::New(env);
  o.Set("avx2", f.avx2 && f.fma && f.f16c);
  o.Set("avx512f", f.avx512f);
  o.Set("avx512bw", f.avx512bw);
  o.Set("avx512bf16", f.avx512_bf16);
  o.Set("avx512vnni", f.avx512_vnni);
  const char* level = f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx2 && f.fma && f.f16c ? "avx512"
                      : f.avx2 && f.fma && f.f16c                                                  ? "avx2"
                                                                                                    : "scalar";
  o.Set("level", level);
  o.Set("bf16Matmul", cpu_bf16_matmul() ? "bf16dot" : "exact");
  return o;
}

void init(Napi::Env env, Napi::Object exports) {
  exports.Set("runOp", Napi::Function::New(env, run_op));
  exports.Set("timeOp", Napi::Function::New(env, time_op));
  exports.Set("cpuFeatures", Napi::Function::New(env, cpu_features_js));
}

Registrar reg(init);

}  // namespace
}  // namespace mlxb::addon
