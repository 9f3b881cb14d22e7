// The four-row block layout of bf16 weights (see weight_layout.h): the conversion done once when
// a model loads (Backend::prepare_weight) and the row read the embedding lookup needs. Only
// matmul and embedding take such weights; every other op sees row-major tensors.
#include "backend/cpu/weight_layout.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "core/weight_memory.h"

namespace mlxb::cpu {

namespace {

constexpr int64_t kRows = 4, kCols = 32;

}  // namespace

bool is_blocked_weight(const Tensor& w) {
  return w.defined() && w.ndim() == 4 && w.dim(2) == kRows && w.dim(3) == kCols && w.dtype() == DType::BF16;
}

void blocked_row_to_f32(const Tensor& w, int64_t row, float* dst) {
  const int64_t chunks = w.dim(1);
  const uint16_t* src = w.ptr<uint16_t>() + (row / kRows) * chunks * kRows * kCols + (row % kRows) * kCols;
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < kCols; ++j) dst[c * kCols + j] = bf16_to_f32(src[c * kRows * kCols + j]);
}

Tensor CpuBackend::prepare_weight(const Tensor& w) {
  if (!w.defined() || w.device() != Device::kCPU || w.dtype() != DType::BF16 || w.ndim() != 2 || !bf16_dot()) return w;
  const char* env = std::getenv("MLXB_CPU_WEIGHT_LAYOUT");  // "rows": keep row-major (comparisons)
  if (env && std::strcmp(env, "rows") == 0) return w;
  const int64_t n = w.dim(0), k = w.dim(1);
  if (n % kRows != 0 || k % kCols != 0 || n == 0 || k == 0 || w.stride(0) != k || w.stride(1) != 1) return w;
  Tensor out = weight_memory({n / kRows, k / kCols, kRows, kCols}, DType::BF16, "a four-row block weight");
  const uint16_t* src = w.ptr<uint16_t>();
  uint16_t* dst = out.ptr<uint16_t>();
  const int64_t chunks = k / kCols;
  parallel_for(n / kRows, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t c = 0; c < chunks; ++c)
        for (int64_t r = 0; r < kRows; ++r)
          std::memcpy(dst + ((b * chunks + c) * kRows + r) * kCols, src + (b * kRows + r) * k + c * kCols, kCols * 2);
  });
  return out;
}

Tensor CpuBackend::prepared_rows(const Tensor& prepared, int64_t r0, int64_t r1) {
  if (!is_blocked_weight(prepared)) return prepared.slice_rows(r0, r1);
  if (r0 % kRows != 0 || r1 % kRows != 0) return Tensor();  // a block holds four rows
  return prepared.slice_rows(r0 / kRows, r1 / kRows);
}

}  // namespace mlxb::cpu
