// Shared by the native checks (each test/native/*.cc is its own executable): CHECK reports a
// failed condition with its place and an optional printf-style message, and counts it in the
// including file's `failures`; time_ms times a device op; nmse compares with a reference; the
// CUDA checks start with skip_without_cuda() and end with exit_status().
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops/ops.h"

inline void check_detail() {}
inline void check_detail(const char* text) { std::fputs(text, stdout); }
template <typename... Args>
void check_detail(const char* format, Args... args) {
  std::printf(format, args...);
}

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      std::printf("FAIL %s:%d: %s ", __FILE__, __LINE__, #cond);  \
      check_detail(__VA_ARGS__);                                  \
      std::printf("\n");                                          \
      ++failures;                                                 \
    }                                                             \
  } while (0)

// Milliseconds per call of f on `device` (one warm-up call; the device is drained before the
// clock starts and before it stops).
template <typename F>
double time_ms(F&& f, int iters, mlxb::Device device = mlxb::Device::kCUDA) {
  f();
  mlxb::backend(device).synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  mlxb::backend(device).synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Normalized squared error sum((got - ref)^2) / sum(ref^2), in double (the plain sum when ref is
// all zeros); infinite when the sizes differ or got holds a NaN or infinity.
template <typename G, typename R>
double nmse(const std::vector<G>& got, const std::vector<R>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? num : num / den;
}

// Elements whose bytes differ between two tensors of one dtype (a size or dtype mismatch counts as
// all of them), for checks of fused ops that must be bit-identical to the ops they replace.
inline int64_t mismatches(const mlxb::Tensor& a, const mlxb::Tensor& b) {
  if (a.nbytes() != b.nbytes() || a.dtype() != b.dtype()) return a.numel() + 1;
  mlxb::Tensor ha = a.to(mlxb::Device::kCPU), hb = b.to(mlxb::Device::kCPU);
  const int64_t es = mlxb::dtype_size(a.dtype());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(ha.data()) + i * es, static_cast<const char*>(hb.data()) + i * es, es) != 0;
  return n;
}

// True, after printing "skipped" and why, when there is no CUDA device to check (the check then
// exits 0: CI builds the CUDA checks, only the device runs them).
inline bool skip_without_cuda() {
  if (mlxb::cuda_available()) return false;
  std::printf("skipped: %s\n", mlxb::cuda_built() ? "no CUDA device" : "built without CUDA");
  return true;
}

// Prints the closing PASSED/FAILED line; the exit status for `failures`.
inline int exit_status(int failures) {
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
