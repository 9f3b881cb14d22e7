// Node-API glue for the quant area: MLX affine quantize / dequantize of typed arrays (used by
// lib/quantize and the tests) and the quantized CPU ops on small arrays (tests only).
// Arrays: float32 data as Float32Array, float16/bfloat16 as Uint16Array (raw bits), packed as
// Uint32Array.
#include <cstring>
#include <memory>

#include "addon/util.h"
#include "ops/ops.h"
#include "quant/affine.h"

namespace mlxb::addon {
namespace {

DType parse_float_dtype(Napi::Env env, const std::string& s, const char* what) {
  if (s == "float32") return DType::F32;
  if (s == "float16") return DType::F16;
  if (s == "bfloat16") return DType::BF16;
  throw Napi::TypeError::New(env, std::string(what) + " must be 'float32', 'float16' or 'bfloat16'");
}

int64_t get_int(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string(key) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (d != static_cast<double>(static_cast<int64_t>(d)) || d < 0 || d > 9.0e15)
    throw Napi::TypeError::New(o.Env(), std::string(key) + " must be a non-negative integer");
  return static_cast<int64_t>(d);
}

// A typed array's bytes as a CPU tensor (no copy; the caller keeps the array alive).
Tensor view(const Napi::Object& o, const char* key, DType dtype, const Shape& shape) {
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray()) throw Napi::TypeError::New(o.Env(), std::string(key) + " must be a typed array");
  Napi::TypedArray ta = v.As<Napi::TypedArray>();
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, key);
  const int64_t need = checked_mul(n, dtype_size(dtype), key);
  if (static_cast<int64_t>(ta.ByteLength()) != need || (ta.ElementSize() != static_cast<size_t>(dtype_size(dtype))))
    throw Napi::TypeError::New(o.Env(), std::string(key) + ": expected " + std::to_string(n) + " " + dtype_name(dtype) +
                                            " values, got " + std::to_string(ta.ByteLength()) + " bytes");
  auto* base = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  return Tensor::wrap(base, shape, dtype);
}

Napi::Value to_js(Napi::Env env, const Tensor& t) {
  const size_t bytes = static_cast<size_t>(t.nbytes());
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, bytes);
  std::memcpy(ab.Data(), t.data(), bytes);
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype()) {
    case DType::F32: return Napi::Float32Array::New(env, n, ab, 0);
    case DType::U32: return Napi::Uint32Array::New(env, n, ab, 0);
    case DType::I32: return Napi::Int32Array::New(env, n, ab, 0);
    default: return Napi::Uint16Array::New(env, n, ab, 0);
  }
}

// {packed, scales, biases, scaleDtype, rows, cols, bits, groupSize} -> QuantWeight over the arrays.
QuantWeight weight_arg(const Napi::Object& o) {
  Napi::Env env = o.Env();
  const int64_t rows = get_int(o, "rows"), cols = get_int(o, "cols");
  const int bits = static_cast<int>(get_int(o, "bits")), gs = static_cast<int>(get_int(o, "groupSize"));
  Napi::Value sd = o.Get("scaleDtype");
  if (!sd.IsString()) throw Napi::TypeError::New(env, "scaleDtype must be a string");
  const DType st = parse_float_dtype(env, sd.As<Napi::String>().Utf8Value(), "scaleDtype");
  if (!quant::bits_supported(bits)) fail(ErrorCode::kUnsupported, "quantization bits must be 2, 3, 4, 5, 6 or 8", "bits");
  if (!quant::group_size_supported(gs)) fail(ErrorCode::kUnsupported, "quantization group size must be 32, 64 or 128", "groupSize");
  if (cols % gs != 0) fail(ErrorCode::kInvalidArgument, "cols must be a multiple of groupSize", "cols");
  QuantWeight w;
  w.bits = bits;
  w.group_size = gs;
  w.rows = rows;
  w.cols = cols;
  w.packed = view(o, "packed", DType::U32, {rows, quant::packed_cols(cols, bits)});
  w.scales = view(o, "scales", st, {rows, cols / gs});
  w.biases = view(o, "biases", st, {rows, cols / gs});
  quant::validate(w, "weight");
  return w;
}

// quantizeAffine({data, dtype, rows, cols}, bits, groupSize, scaleDtype) -> Promise<{packed, scales, biases}>
Napi::Value quantize_affine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    Napi::Object o = arg_object(info, 0, "input");
    const int bits = static_cast<int>(arg_number(info, 1, "bits"));
    const int gs = static_cast<int>(arg_number(info, 2, "groupSize"));
    const DType st = parse_float_dtype(env, arg_string(info, 3, "scaleDtype"), "scaleDtype");
    Napi::Value dv = o.Get("dtype");
    if (!dv.IsString()) throw Napi::TypeError::New(env, "dtype must be a string");
    const DType dt = parse_float_dtype(env, dv.As<Napi::String>().Utf8Value(), "dtype");
    const int64_t rows = get_int(o, "rows"), cols = get_int(o, "cols");
    Tensor w = view(o, "data", dt, {rows, cols});
    auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(o));
    auto result = std::make_shared<QuantWeight>();
    return run_async(
        env, [w, bits, gs, st, result] { *result = quant::quantize(w, bits, gs, st); },
        [keep, result](Napi::Env env) -> Napi::Value {
          Napi::Object r = Napi::Object::New(env);
          r.Set("packed", to_js(env, result->packed));
          r.Set("scales", to_js(env, result->scales));
          r.Set("biases", to_js(env, result->biases));
          keep->Reset();
          return r;
        });
  });
}

// dequantizeAffine(weight) -> Float32Array [rows * cols] by the format's formula.
Napi::Value dequantize_affine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    QuantWeight w = weight_arg(arg_object(info, 0, "weight"));
    Tensor out = Tensor::empty({w.rows, w.cols}, DType::F32);
    quant::dequantize(w, out);
    return to_js(env, out);
  });
}

// qmatmulAffine(x: Float32Array [M*K], M, weight, bias?) -> Float32Array [M*N] (CPU op; tests).
Napi::Value qmatmul_affine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    Napi::Object args = arg_object(info, 0, "args");
    QuantWeight w = weight_arg(args.Get("weight").As<Napi::Object>());
    const int64_t M = get_int(args, "m");
    Tensor x = view(args, "x", DType::F32, {M, w.cols});
    Tensor y = Tensor::empty({M, w.rows}, DType::F32);
    Tensor bias;
    if (args.Has("bias") && !args.Get("bias").IsUndefined()) bias = view(args, "bias", DType::F32, {w.rows});
    ops::qmatmul(x, w, bias.defined() ? &bias : nullptr, y);
    return to_js(env, y);
  });
}

// qembeddingAffine(ids: Int32Array, table, scale) -> Float32Array [T * cols] (CPU op; tests).
Napi::Value qembedding_affine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    Napi::Object args = arg_object(info, 0, "args");
    QuantWeight w = weight_arg(args.Get("weight").As<Napi::Object>());
    Napi::Value idv = args.Get("ids");
    if (!idv.IsTypedArray()) throw Napi::TypeError::New(env, "ids must be an Int32Array");
    const int64_t T = static_cast<int64_t>(idv.As<Napi::TypedArray>().ElementLength());
    Tensor ids = view(args, "ids", DType::I32, {T});
    const float scale = static_cast<float>(args.Get("scale").IsNumber() ? args.Get("scale").As<Napi::Number>().DoubleValue() : 1.0);
    Tensor out = Tensor::empty({T, w.cols}, DType::F32);
    ops::qembedding(w, ids, scale, out);
    return to_js(env, out);
  });
}

void init(Napi::Env env, Napi::Object exports) {
  exports.Set("quantizeAffine", Napi::Function::New(env, quantize_affine));
  exports.Set("dequantizeAffine", Napi::Function::New(env, dequantize_affine));
  exports.Set("qmatmulAffine", Napi::Function::New(env, qmatmul_affine));
  exports.Set("qembeddingAffine", Napi::Function::New(env, qembedding_affine));
}

static Registrar reg(init);

}  // namespace
}  // namespace mlxb::addon
