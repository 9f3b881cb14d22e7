// MLX affine group quantization: the on-disk format, MLX's quantizer, and the reference unpacker.
//
// Format (one weight matrix [N, K], quantized along K in groups of `group_size`):
// - `packed` uint32 [N, K * bits / 32]. Each row is one little-endian bit stream: element k of the
//   row occupies bits [k * bits, (k + 1) * bits) counted from bit 0 of the row's first byte (bit i
//   of byte j is stream bit 8 * j + i). For 2/4/8 bits this is "element j of word w at bits
//   [j * bits, (j + 1) * bits) of w"; for 3/5/6 bits values straddle bytes and words, exactly as
//   MLX packs 8 (3/5-bit) or 4 (6-bit) values into 3/5/3 bytes.
// - `scales`, `biases` [N, K / group_size] in f32/f16/bf16: dequantized w[n, k] =
//   scale[n, g] * q[n, k] + bias[n, g] with g = k / group_size, evaluated in float32 as one
//   multiply rounded to float32, then one add rounded to float32 (no fused multiply-add).
//
// Quantizer (as MLX does it, in float32): per group w_min, w_max; scale = max((w_max - w_min) /
// (2^bits - 1), 1e-7), negated unless |w_min| > |w_max|; edge = the larger-magnitude end; q0 =
// rint(edge / scale); when q0 != 0 the scale becomes edge / q0 and the bias edge (so the edge is
// exact and zero stays representable), else bias = 0; q = clamp(rint((w - bias) / scale), 0,
// 2^bits - 1). scales/biases are stored in the output dtype after q was computed with the float32
// values.
//
// Not here: matmul kernels (backend/cpu/qmatmul*.cc), file loading (models/ through load_linear).
#pragma once
#include <cstdint>
#include <string>

#include <vector>

#include "ops/ops.h"

namespace mlxb::quant {

bool bits_supported(int bits);         // 2, 3, 4, 5, 6, 8
bool group_size_supported(int gs);     // 32, 64, 128

// uint32 words per packed row of `cols` elements (cols must be a multiple of 32).
inline int64_t packed_cols(int64_t cols, int bits) { return cols * bits / 32; }

// Element k of a packed row.
inline uint32_t unpack_one(const uint32_t* row, int64_t k, int bits) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(row);
  int64_t bit = k * bits;
  int64_t byte = bit >> 3;
  int shift = static_cast<int>(bit & 7);
  uint32_t v = b[byte];
  if (shift + bits > 8) v |= static_cast<uint32_t>(b[byte + 1]) << 8;
  return (v >> shift) & ((1u << bits) - 1u);
}

// Unpacks `count` elements starting at element `k0` (k0 a multiple of 8) into q.
void unpack_row(const uint32_t* row, int64_t k0, int64_t count, int bits, uint8_t* q);

// The CPU's 8-row tile layout of packed 4-bit rows (QuantWeight::tile): where byte `byte` of row
// `row` lies when each row has `row_bytes` bytes. Rows 8t..8t+7 keep their span of the tensor; in
// it, 64-byte pieces p of the 8 rows follow each other (piece p of row 8t + j at (8p + j) * 64).
constexpr int kTileRows = 8;
constexpr int64_t kTilePiece = 64;
inline int64_t tiled_byte(int64_t row, int64_t byte, int64_t row_bytes) {
  return (row / kTileRows) * kTileRows * row_bytes + ((byte / kTilePiece) * kTileRows + row % kTileRows) * kTilePiece + byte % kTilePiece;
}
// Whether a weight of this format and shape can take the tile layout.
inline bool tile_layout_fits(int bits, int group_size, int64_t rows, int64_t cols) {
  return bits == 4 && group_size % 64 == 0 && cols % 128 == 0 && rows % kTileRows == 0 && rows > 0;
}
// Row r's packed words, contiguous: a pointer into the weight (row-major), or `tmp` filled from the
// tiles.
const uint32_t* packed_row(const QuantWeight& w, int64_t r, std::vector<uint32_t>& tmp);
// Rows [r0, r1) as a QuantWeight of the same layout (views, no copy). A tiled weight is cut only at
// multiples of its tile: elsewhere the result's packed tensor is undefined.
QuantWeight row_view(const QuantWeight& w, int64_t r0, int64_t r1);

// Checks a QuantWeight read from a file: bits/group size supported, dtypes (packed u32,
// scales/biases f32/f16/bf16 and equal), shapes consistent with rows x cols. `name` (the layer
// prefix) goes into the error's field. Throws Error(kInvalidFile / kUnsupported).
void validate(const QuantWeight& w, const std::string& name);

// Builds and validates a QuantWeight from the three tensors of a checkpoint layer: the logical
// column count comes from packed.shape[1] * 32 / bits.
QuantWeight make_weight(Tensor packed, Tensor scales, Tensor biases, int bits, int group_size,
                        const std::string& name);

// Quantizes w [N, K] (f32/f16/bf16, CPU, contiguous) with MLX's algorithm as MLX quantizes a
// tensor of dtype `scale_dtype` (f32/f16/bf16): w's values are rounded to that dtype first, and
// scales/biases are stored in it. Threaded over rows.
QuantWeight quantize(const Tensor& w, int bits, int group_size, DType scale_dtype);

// Dequantizes rows [r0, r1) into out (float32, (r1 - r0) x cols) by the format's formula.
void dequantize_rows(const QuantWeight& w, int64_t r0, int64_t r1, float* out);
// Whole matrix into out (float32 [N, K] CPU tensor, contiguous). Threaded.
void dequantize(const QuantWeight& w, Tensor& out);

// Scale/bias of (row, group) as float32.
float scale_at(const QuantWeight& w, int64_t row, int64_t group);
float bias_at(const QuantWeight& w, int64_t row, int64_t group);

}  // namespace mlxb::quant
