// The CPU's decode layout for 4-bit weights (QuantWeight::tile, quant/affine.h: tiled_byte): made
// once when a model loads. The 4-bit kernels (qmatmul_q4_avx2.cc, qmatmul_q4_avx512.cc) read a
// tile of 8 weight rows per step; row-major, that is 8 streams of 1-7 KB rows, which the hardware
// prefetcher follows poorly (1B-shaped decode matmuls on the 2-core Zen 5 VM, in-process A/B:
// ~26.8 -> ~18.3 ms per token with the two-block kernel). Tiled, the 8 rows' 64-byte pieces
// alternate and a tile is one sequential stream. Same bytes, same results.
// MLXB_CPU_WEIGHT_LAYOUT=rows (read when a model loads) keeps the row-major layout.
#include <cstdlib>
#include <cstring>

#include "backend/cpu/backend.h"
#include "core/thread_pool.h"
#include "core/weight_memory.h"
#include "quant/affine.h"

namespace mlxb::cpu {

QuantWeight CpuBackend::prepare_qweight(const QuantWeight& w) {
  if (w.tile != 0 || !w.packed.defined() || w.packed.device() != Device::kCPU || !w.packed.is_contiguous() ||
      !quant::tile_layout_fits(w.bits, w.group_size, w.rows, w.cols))
    return w;
  const char* env = std::getenv("MLXB_CPU_WEIGHT_LAYOUT");  // "rows": keep row-major (comparisons)
  if (env && std::strcmp(env, "rows") == 0) return w;
  QuantWeight out = w;
  out.packed = weight_memory(w.packed.shape(), DType::U32, "a tiled 4-bit weight");
  out.tile = quant::kTileRows;
  const int64_t row_bytes = quant::packed_cols(w.cols, w.bits) * 4;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(w.packed.data());
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.packed.data());
  parallel_for(w.rows / quant::kTileRows, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0 * quant::kTileRows; r < t1 * quant::kTileRows; ++r)
      for (int64_t b = 0; b < row_bytes; b += quant::kTilePiece)
        std::memcpy(dst + quant::tiled_byte(r, b, row_bytes), src + r * row_bytes + b, quant::kTilePiece);
  });
  return out;
}

}  // namespace mlxb::cpu
