// Quantized embedding lookup on the CPU: each requested row is dequantized by the format's formula
// (quant::dequantize_rows, bit-exact) and multiplied by `scale` when it is not 1.
#include <vector>

#include "backend/cpu/backend.h"
#include "core/thread_pool.h"
#include "quant/affine.h"

namespace mlxb::cpu {

void CpuBackend::qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out) {
  quant::validate(table, "qembedding table");
  if (ids.dtype() != DType::I32 || !ids.is_contiguous())
    fail(ErrorCode::kInvalidArgument, "qembedding: ids must be contiguous int32, got " + ids.describe());
  const int64_t T = ids.numel(), H = table.cols;
  if (!out.is_contiguous() || out.numel() != T * H || out.dim(-1) != H)
    fail(ErrorCode::kInvalidArgument, "qembedding: out " + out.describe() + " is not [" + std::to_string(T) + ", " + std::to_string(H) + "]");
  if (out.dtype() != DType::F32 && out.dtype() != DType::BF16 && out.dtype() != DType::F16)
    fail(ErrorCode::kInvalidArgument, "qembedding: out must be float32, bfloat16 or float16, got " + out.describe());
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (id[t] < 0 || id[t] >= table.rows)
      fail(ErrorCode::kInvalidArgument, "qembedding: token id " + std::to_string(id[t]) + " is outside the vocabulary of " + std::to_string(table.rows), "ids");
  parallel_for(T, 4, [&](int64_t t0, int64_t t1) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t t = t0; t < t1; ++t) {
      float* dst = out.dtype() == DType::F32 ? out.ptr<float>() + t * H : row.data();
      quant::dequantize_rows(table, id[t], id[t] + 1, dst);
      if (scale != 1.0f)
        for (int64_t h = 0; h < H; ++h) dst[h] *= scale;
      if (out.dtype() == DType::BF16) {
        uint16_t* o = out.ptr<uint16_t>() + t * H;
        for (int64_t h = 0; h < H; ++h) o[h] = f32_to_bf16(dst[h]);
      } else if (out.dtype() == DType::F16) {
        uint16_t* o = out.ptr<uint16_t>() + t * H;
        for (int64_t h = 0; h < H; ++h) o[h] = f32_to_f16(dst[h]);
      }
    }
  });
}

}  // namespace mlxb::cpu
