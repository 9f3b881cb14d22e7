// embedding: out[T,H] = float32(table[ids[t], :]) * scale for an f32/bf16/f16 table [V, H].
// An id outside [0, V) is an InvalidArgument error, checked before anything is written. The table
// may be a bf16 weight in the four-row block layout (weight_layout.h: a tied LM head).
#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/weight_layout.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) {
  const char* op = "embedding";
  check_host(op, "table", table);
  check_host(op, "ids", ids);
  check_host(op, "out", out);
  check_float(op, "table", table);
  check_dtype(op, "ids", ids, DType::I32);
  check_dtype(op, "out", out, DType::F32);
  const bool blocked = is_blocked_weight(table);
  MLXB_ARG(table.ndim() == 2 || blocked, op, "table must be [V, H], got " + table.describe());
  const int64_t v = blocked ? table.dim(0) * 4 : table.dim(0), h = blocked ? table.dim(1) * 32 : table.dim(1), t = ids.numel();
  MLXB_ARG(out.numel() == t * h && out.ndim() >= 1 && out.dim(-1) == h, op,
          "out must be [T, H] = [" + std::to_string(t) + ", " + std::to_string(h) + "], got " + out.describe());
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < t; ++i)
    MLXB_ARG(id[i] >= 0 && id[i] < v, op, "token id " + std::to_string(id[i]) + " at " + std::to_string(i) +
                                             " is outside the vocabulary [0, " + std::to_string(v) + ")");
  float* o = out.ptr<float>();
  const DType dt = table.dtype();
  parallel_for(t, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0; i < t1; ++i) {
      float* dst = o + i * h;
      if (blocked) blocked_row_to_f32(table, id[i], dst);
      else row_to_f32(elem_ptr(table, static_cast<int64_t>(id[i]) * h), dt, h, dst);
      if (scale != 1.0f)
        for (int64_t j = 0; j < h; ++j) dst[j] *= scale;
    }
  });
}

}  // namespace mlxb::cpu
