// Helpers shared by the CPU op files: argument checks that raise kInvalidArgument, and scalar
// conversion of f32/bf16/f16 rows to and from float32. Not a kernel library: SIMD code lives in
// the *_avx2.cc / *_avx512.cc files behind kernels.h.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mlxb::cpu {

[[noreturn]] inline void bad_arg(const char* op, const std::string& msg) {
  fail(ErrorCode::kInvalidArgument, std::string(op) + ": " + msg);
}

// Argument check whose message is only built when it fails (describe() is not free, and ops run
// per token).
#define MLXB_ARG(cond, op, msg)                    \
  do {                                             \
    if (!(cond)) ::mlxb::cpu::bad_arg((op), (msg)); \
  } while (0)

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Checks a CPU tensor: defined, on the host, contiguous, of one of the allowed dtypes.
inline void check_host(const char* op, const char* name, const Tensor& t, bool need_contiguous = true) {
  MLXB_ARG(t.defined(), op, std::string(name) + " is undefined");
  MLXB_ARG(t.device() == Device::kCPU, op, std::string(name) + " must be on the cpu, got " + t.describe());
  if (need_contiguous) MLXB_ARG(t.is_contiguous(), op, std::string(name) + " must be contiguous: " + t.describe());
}

inline void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  MLXB_ARG(t.dtype() == want, op, std::string(name) + " must be " + dtype_name(want) + ", got " + t.describe());
}

inline void check_float(const char* op, const char* name, const Tensor& t) {
  MLXB_ARG(is_float(t.dtype()), op, std::string(name) + " must be float32/bfloat16/float16, got " + t.describe());
}

// Number of rows of the last dimension: the product of all leading dims (1 for a vector).
inline int64_t rows_of(const Tensor& t) {
  int64_t r = 1;
  for (int64_t i = 0; i + 1 < t.ndim(); ++i) r *= t.dim(i);
  return r;
}

// The checks every op on float32 x and y with a weight w (matmul, the norms) starts with: all three
// on the host and contiguous, x and y float32, w float32/bfloat16/float16.
inline void check_f32_x_w_y(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  check_host(op, "x", x);
  check_host(op, "w", w);
  check_host(op, "y", y);
  check_dtype(op, "x", x, DType::F32);
  check_dtype(op, "y", y, DType::F32);
  check_float(op, "w", w);
}

// The checks of a row normalization (layer_norm, rms_norm): check_f32_x_w_y, x and y of one shape,
// w of h = x.dim(-1) elements. Returns h.
inline int64_t check_norm_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  check_f32_x_w_y(op, x, w, y);
  MLXB_ARG(x.ndim() >= 1 && x.numel() == y.numel() && y.dim(-1) == x.dim(-1), op,
          "x and y must have the same shape: " + x.describe() + " vs " + y.describe());
  const int64_t h = x.dim(-1);
  MLXB_ARG(w.numel() == h, op, "w must have " + std::to_string(h) + " elements, got " + w.describe());
  return h;
}

inline float load_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0f;
  }
}

inline void store_f32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = f32_to_f16(v); break;
    default: break;
  }
}

// dst[0..n) = float32(src[0..n)) for an f32/bf16/f16 source (scalar; kernels.h has SIMD versions).
inline void row_to_f32(const void* src, DType t, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f32(src, t, i);
}

inline const char* elem_ptr(const Tensor& t, int64_t elem_offset) {
  return static_cast<const char*>(t.data()) + elem_offset * dtype_size(t.dtype());
}

}  // namespace mlxb::cpu
