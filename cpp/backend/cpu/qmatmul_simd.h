// Helpers shared by the SIMD quantized-matmul kernels (qmatmul_avx2.cc, qmatmul_int_avx2.cc,
// qmatmul_avx512.cc; included only there): a weight's scale or bias as float32, and where the
// float kernels read a group's values from. Everything here has internal linkage (an unnamed
// namespace), not plain `inline`: those files are compiled with different -m flags, and the
// linker would keep one copy of a shared inline function, built with whichever instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/qmatmul.h"
#include "quant/affine.h"

namespace mlxb::cpu::qmm {
namespace {

// Element i of a scales or biases array of dtype t (float32, bfloat16 or float16) as float32.
inline float load_sb(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == DType::BF16) {  // not dtype.h's bf16_to_f32: non-SIMD files share that inline function
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(h);
}

// The values of group g (gs elements) of weight row n, for the float kernels: 4 and 8 bits read
// the packed bytes in place (two values a byte, one value a byte); other widths are unpacked into
// buf (gs bytes, one value each) and read from there as 8-bit values.
template <int BITS>
inline const uint8_t* group_bytes(const uint8_t* packed, int64_t row_bytes, int64_t n, int64_t g, int64_t gs, uint8_t* buf) {
  if (BITS == 4) return packed + n * row_bytes + g * gs / 2;
  if (BITS == 8) return packed + n * row_bytes + g * gs;
  quant::unpack_row(reinterpret_cast<const uint32_t*>(packed + n * row_bytes), g * gs, gs, BITS, buf);
  return buf;
}

}  // namespace
}  // namespace mlxb::cpu::qmm
