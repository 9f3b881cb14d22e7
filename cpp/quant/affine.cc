// MLX affine quantization: validation, MLX's quantizer and the reference dequantizer (see affine.h
// for the format). This file is built without FMA flags on purpose: the dequantizer's
// `scale * q + bias` must round twice, as the format's formula says.
#include "quant/affine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/thread_pool.h"

namespace mlxb::quant {

bool bits_supported(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }
bool group_size_supported(int gs) { return gs == 32 || gs == 64 || gs == 128; }

void unpack_row(const uint32_t* row, int64_t k0, int64_t count, int bits, uint8_t* q) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(row);
  const uint32_t mask = (1u << bits) - 1u;
  if (bits == 8) {
    std::memcpy(q, b + k0, static_cast<size_t>(count));
    return;
  }
  if (bits == 4) {
    const uint8_t* p = b + k0 / 2;
    for (int64_t i = 0; i < count / 2; ++i) {
      q[2 * i] = p[i] & 0xf;
      q[2 * i + 1] = p[i] >> 4;
    }
    return;
  }
  // Generic: 8 elements = `bits` bytes, read as one little-endian 64-bit chunk.
  const uint8_t* p = b + (k0 / 8) * bits;
  for (int64_t i = 0; i < count; i += 8) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, p, static_cast<size_t>(bits));
    p += bits;
    for (int j = 0; j < 8; ++j) q[i + j] = static_cast<uint8_t>((chunk >> (j * bits)) & mask);
  }
}

static bool float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

static float load_float(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0f;
  }
}

static void store_float(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = f32_to_f16(v); break;
    case DType::BF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(v); break;
    default: break;
  }
}

static float round_to(float v, DType t) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

float scale_at(const QuantWeight& w, int64_t row, int64_t group) {
  return load_float(w.scales.data(), w.scales.dtype(), row * (w.cols / w.group_size) + group);
}
float bias_at(const QuantWeight& w, int64_t row, int64_t group) {
  return load_float(w.biases.data(), w.biases.dtype(), row * (w.cols / w.group_size) + group);
}

void validate(const QuantWeight& w, const std::string& name) {
  if (!bits_supported(w.bits))
    fail(ErrorCode::kUnsupported, name + ": quantization bits " + std::to_string(w.bits) + " not supported (2, 3, 4, 5, 6, 8)", name);
  if (!group_size_supported(w.group_size))
    fail(ErrorCode::kUnsupported, name + ": quantization group size " + std::to_string(w.group_size) + " not supported (32, 64, 128)", name);
  if (!w.packed.defined()) fail(ErrorCode::kInvalidFile, name + ": missing packed weight", name + ".weight");
  if (!w.scales.defined()) fail(ErrorCode::kInvalidFile, name + ": missing scales", name + ".scales");
  if (!w.biases.defined()) fail(ErrorCode::kInvalidFile, name + ": missing biases (affine quantization needs them)", name + ".biases");
  if (w.packed.dtype() != DType::U32 || w.packed.ndim() != 2)
    fail(ErrorCode::kInvalidFile, name + ".weight: a quantized weight must be a 2-D uint32 tensor, got " + w.packed.describe(), name + ".weight");
  if (!float_dtype(w.scales.dtype()) || w.scales.ndim() != 2)
    fail(ErrorCode::kInvalidFile, name + ".scales: must be a 2-D float tensor, got " + w.scales.describe(), name + ".scales");
  if (w.biases.dtype() != w.scales.dtype() || w.biases.shape() != w.scales.shape())
    fail(ErrorCode::kInvalidFile, name + ".biases: must match scales (" + w.scales.describe() + "), got " + w.biases.describe(), name + ".biases");
  if (w.rows <= 0 || w.cols <= 0 || w.cols % w.group_size != 0)
    fail(ErrorCode::kInvalidFile, name + ": " + std::to_string(w.cols) + " columns is not a positive multiple of the group size " + std::to_string(w.group_size), name + ".weight");
  if (w.packed.dim(0) != w.rows || w.packed.dim(1) != packed_cols(w.cols, w.bits))
    fail(ErrorCode::kInvalidFile, name + ".weight: shape " + w.packed.describe() + " does not hold " + std::to_string(w.rows) + " x " + std::to_string(w.cols) + " values at " + std::to_string(w.bits) + " bits", name + ".weight");
  if (w.scales.dim(0) != w.rows || w.scales.dim(1) != w.cols / w.group_size)
    fail(ErrorCode::kInvalidFile, name + ".scales: shape " + w.scales.describe() + " does not match " + std::to_string(w.rows) + " rows of " + std::to_string(w.cols / w.group_size) + " groups of " + std::to_string(w.group_size) + " (wrong group size?)", name + ".scales");
  if (!w.packed.is_contiguous() || !w.scales.is_contiguous() || !w.biases.is_contiguous())
    fail(ErrorCode::kInvalidArgument, name + ": quantized tensors must be contiguous", name);
  if (w.tile != 0 && (w.tile != kTileRows || !tile_layout_fits(w.bits, w.group_size, w.rows, w.cols)))
    fail(ErrorCode::kInvalidArgument, name + ": the " + std::to_string(w.tile) + "-row tile layout does not fit a " + std::to_string(w.bits) +
                                          "-bit weight of " + std::to_string(w.rows) + " x " + std::to_string(w.cols) + " in groups of " +
                                          std::to_string(w.group_size), name);
}

const uint32_t* packed_row(const QuantWeight& w, int64_t r, std::vector<uint32_t>& tmp) {
  const int64_t pc = packed_cols(w.cols, w.bits);
  if (w.tile == 0) return w.packed.ptr<uint32_t>() + r * pc;
  tmp.resize(static_cast<size_t>(pc));
  const int64_t row_bytes = pc * 4;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(w.packed.data());
  uint8_t* dst = reinterpret_cast<uint8_t*>(tmp.data());
  for (int64_t b = 0; b < row_bytes; b += kTilePiece) std::memcpy(dst + b, src + tiled_byte(r, b, row_bytes), kTilePiece);
  return tmp.data();
}

QuantWeight row_view(const QuantWeight& w, int64_t r0, int64_t r1) {
  QuantWeight v = w;
  v.rows = r1 - r0;
  v.scales = w.scales.slice_rows(r0, r1);
  if (w.biases.defined()) v.biases = w.biases.slice_rows(r0, r1);
  if (w.tile != 0 && (r0 % w.tile != 0 || r1 % w.tile != 0)) v.packed = Tensor();
  else v.packed = w.packed.slice_rows(r0, r1);  // a tile's rows keep their span: row-aligned views stay valid
  return v;
}

QuantWeight make_weight(Tensor packed, Tensor scales, Tensor biases, int bits, int group_size, const std::string& name) {
  QuantWeight w;
  w.bits = bits;
  w.group_size = group_size;
  if (bits_supported(bits) && packed.defined() && packed.ndim() == 2) {
    w.rows = packed.dim(0);
    w.cols = checked_mul(packed.dim(1), 32, "quantized weight columns") / bits;
    if (packed.dim(1) * 32 % bits != 0) w.cols = -1;
  }
  w.packed = std::move(packed);
  w.scales = std::move(scales);
  w.biases = std::move(biases);
  validate(w, name);
  return w;
}

// One group of MLX's quantizer: writes q (unpacked) and returns scale/bias in float32.
static void quantize_group(const float* w, int gs, int bits, uint8_t* q, float* scale_out, float* bias_out) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (int j = 0; j < gs; ++j) {
    w_max = std::max(w_max, w[j]);
    w_min = std::min(w_min, w[j]);
  }
  bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  float edge = mask ? w_min : w_max;
  float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < gs; ++j) {
    float v = std::rint((w[j] - bias) / scale);
    v = std::min(std::max(v, 0.0f), n_bins);
    q[j] = static_cast<uint8_t>(v);
  }
  *scale_out = scale;
  *bias_out = bias;
}

// Packs q[0..cols) into the row's bit stream (row zeroed by the caller).
static void pack_row(const uint8_t* q, int64_t cols, int bits, uint32_t* row) {
  uint8_t* b = reinterpret_cast<uint8_t*>(row);
  for (int64_t k = 0; k < cols; ++k) {
    int64_t bit = k * bits;
    int64_t byte = bit >> 3;
    int shift = static_cast<int>(bit & 7);
    uint32_t v = static_cast<uint32_t>(q[k]) << shift;
    b[byte] |= static_cast<uint8_t>(v & 0xff);
    if (shift + bits > 8) b[byte + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

QuantWeight quantize(const Tensor& w, int bits, int group_size, DType scale_dtype) {
  if (!bits_supported(bits)) fail(ErrorCode::kInvalidArgument, "quantization bits must be 2, 3, 4, 5, 6 or 8", "bits");
  if (!group_size_supported(group_size)) fail(ErrorCode::kInvalidArgument, "quantization group size must be 32, 64 or 128", "groupSize");
  if (w.device() != Device::kCPU || !w.is_contiguous() || !float_dtype(w.dtype()))
    fail(ErrorCode::kInvalidArgument, "quantize needs a contiguous float CPU tensor, got " + w.describe(), "weight");
  if (w.ndim() != 2) fail(ErrorCode::kInvalidArgument, "quantize needs a 2-D [rows, cols] tensor, got " + w.describe(), "weight");
  if (!float_dtype(scale_dtype)) fail(ErrorCode::kInvalidArgument, "scales must be float32, float16 or bfloat16", "dtype");
  const int64_t rows = w.dim(0), cols = w.dim(1);
  if (cols <= 0 || cols % group_size != 0)
    fail(ErrorCode::kInvalidArgument, "the last dimension (" + std::to_string(cols) + ") must be a multiple of the group size " + std::to_string(group_size), "weight");
  const int64_t groups = cols / group_size;
  QuantWeight out;
  out.bits = bits;
  out.group_size = group_size;
  out.rows = rows;
  out.cols = cols;
  out.packed = Tensor::zeros({rows, packed_cols(cols, bits)}, DType::U32);
  out.scales = Tensor::empty({rows, groups}, scale_dtype);
  out.biases = Tensor::empty({rows, groups}, scale_dtype);
  const void* src = w.data();
  const DType src_t = w.dtype();
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> wf(static_cast<size_t>(cols));
    std::vector<uint8_t> q(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      // The values are first rounded to the scales' dtype: MLX quantizes a tensor of that dtype.
      for (int64_t k = 0; k < cols; ++k) wf[k] = round_to(load_float(src, src_t, r * cols + k), scale_dtype);
      for (int64_t g = 0; g < groups; ++g) {
        float s, b;
        quantize_group(wf.data() + g * group_size, group_size, bits, q.data() + g * group_size, &s, &b);
        store_float(out.scales.data(), scale_dtype, r * groups + g, s);
        store_float(out.biases.data(), scale_dtype, r * groups + g, b);
      }
      pack_row(q.data(), cols, bits, out.packed.ptr<uint32_t>() + r * packed_cols(cols, bits));
    }
  });
  return out;
}

// The formula, two roundings. `volatile`-free: this translation unit has no FMA flags, and the
// explicit temporaries keep the multiply's rounding even if a compiler contracted across them.
static inline float dequant_value(float scale, uint32_t q, float bias) {
  float prod = scale * static_cast<float>(q);
  return prod + bias;
}

void dequantize_rows(const QuantWeight& w, int64_t r0, int64_t r1, float* out) {
  const int64_t groups = w.cols / w.group_size;
  std::vector<uint8_t> q(static_cast<size_t>(w.cols));
  std::vector<uint32_t> tmp;
  for (int64_t r = r0; r < r1; ++r) {
    unpack_row(packed_row(w, r, tmp), 0, w.cols, w.bits, q.data());
    float* o = out + (r - r0) * w.cols;
    for (int64_t g = 0; g < groups; ++g) {
      float s = scale_at(w, r, g), b = bias_at(w, r, g);
      for (int64_t j = 0; j < w.group_size; ++j) {
        int64_t k = g * w.group_size + j;
        o[k] = dequant_value(s, q[k], b);
      }
    }
  }
}

void dequantize(const QuantWeight& w, Tensor& out) {
  if (out.dtype() != DType::F32 || out.device() != Device::kCPU || !out.is_contiguous() || out.ndim() != 2 ||
      out.dim(0) != w.rows || out.dim(1) != w.cols)
    fail(ErrorCode::kInvalidArgument, "dequantize output must be float32 [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] on the CPU, got " + out.describe());
  float* o = out.ptr<float>();
  parallel_for(w.rows, 16, [&](int64_t r0, int64_t r1) { dequantize_rows(w, r0, r1, o + r0 * w.cols); });
}

}  // namespace mlxb::quant
