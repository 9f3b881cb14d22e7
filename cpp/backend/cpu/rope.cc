// rope: in place on x [T, H, D] (float32): the first rot_dim of every head is rotated by
// angle = float(positions[t]) * inv_freq[i], with cos/sin scaled by mscale. Half-split layout
// pairs (i, i + rot_dim/2) (Llama, "rotate_half"); interleaved pairs (2i, 2i + 1) (GPT-J style).
// Dims past rot_dim are left as they are (partial rotary). Angles are computed in float32 like
// Hugging Face's rotary embedding.
#include <cmath>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

void CpuBackend::rope(Tensor& x, const Tensor& positions, const RopeArgs& args) {
  const char* op = "rope";
  check_host(op, "x", x);
  check_host(op, "positions", positions);
  check_host(op, "inv_freq", args.inv_freq);
  check_dtype(op, "x", x, DType::F32);
  check_dtype(op, "positions", positions, DType::I32);
  check_dtype(op, "inv_freq", args.inv_freq, DType::F32);
  MLXB_ARG(x.ndim() == 3, op, "x must be [T, H, D], got " + x.describe());
  const int64_t t = x.dim(0), nh = x.dim(1), d = x.dim(2), rd = args.rot_dim;
  MLXB_ARG(rd > 0 && rd % 2 == 0 && rd <= d, op, "rot_dim must be even and in (0, head_dim], got " + std::to_string(rd));
  MLXB_ARG(args.inv_freq.numel() == rd / 2, op, "inv_freq must have rot_dim/2 entries, got " + args.inv_freq.describe());
  MLXB_ARG(positions.numel() == t, op, "positions must have T entries, got " + positions.describe());
  const int32_t* pos = positions.ptr<int32_t>();
  const float* inv = args.inv_freq.ptr<float>();
  float* xp = x.ptr<float>();
  const int64_t half = rd / 2;
  parallel_for(t, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t i = t0; i < t1; ++i) {
      const float p = static_cast<float>(pos[i]);
      for (int64_t j = 0; j < half; ++j) {
        const float a = p * inv[j];
        cs[j] = std::cos(a) * args.mscale;
        sn[j] = std::sin(a) * args.mscale;
      }
      for (int64_t h = 0; h < nh; ++h) {
        float* v = xp + (i * nh + h) * d;
        for (int64_t j = 0; j < half; ++j) {
          const int64_t a = args.interleaved ? 2 * j : j;
          const int64_t b = args.interleaved ? 2 * j + 1 : j + half;
          const float x1 = v[a], x2 = v[b];
          v[a] = x1 * cs[j] - x2 * sn[j];
          v[b] = x2 * cs[j] + x1 * sn[j];
        }
      }
    }
  });
}

}  // namespace mlxb::cpu
