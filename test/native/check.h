// Shared by the native checks (each test/native/*.cc is its own executable): CHECK reports a
// failed condition with its place and an optional printf-style message, and counts it in the
// including file's `failures`; time_ms times a device op.
#pragma once
#include <chrono>
#include <cstdio>

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
