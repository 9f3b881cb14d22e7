// Quantized matmul on the CPU: argument checks, the scalar reference kernel, and the run-time
// choice of the AVX-512 / AVX2 kernels (qmatmul_avx512.cc, qmatmul_avx2.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/qmatmul.h"
#include "backend/cpu/scratch.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "quant/affine.h"

namespace mlxb::cpu {
namespace qmm {

bool wants_nibble_order(int bits) { return bits == 4; }

void to_nibble_order(const float* x, int64_t K, float* out) {
  for (int64_t b = 0; b < K; b += 32) {
    for (int j = 0; j < 16; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 16 + j] = x[b + 2 * j + 1];
    }
  }
}

bool int_kernel_for(int bits) { return bits == 4 || bits == 8; }

int64_t int_block(int bits, int group_size) { return bits == 4 && group_size >= 64 ? 64 : 32; }

void quantize_acts(const float* x, int64_t M, int64_t K, int group_size, int bits, int16_t* q16, float* d, float* gsum) {
  const int64_t block = int_block(bits, group_size), blocks = K / block, groups = K / group_size;
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int64_t k = g * group_size; k < (g + 1) * group_size; ++k) s += xm[k];
      gsum[m * groups + g] = s;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = xm + b * block;
      float amax = 0.0f;
      for (int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
      d[m * blocks + b] = amax / 32767.0f;
      int16_t* o = q16 + m * K + b * block;
      for (int64_t j = 0; j < block; ++j) {
        const float r = std::min(32767.0f, std::max(-32767.0f, std::nearbyint(xb[j] * id)));
        const int64_t at = bits == 4 ? ((j & 1) ? block / 2 + j / 2 : j / 2) : j;
        o[at] = static_cast<int16_t>(r);
      }
    }
  }
}

void kernel_scalar(const Args& a, int64_t n0, int64_t n1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(a.K));
  for (int64_t n = n0; n < n1; ++n) {
    quant::dequantize_rows(*a.w, n, n + 1, row.data());
    for (int64_t m = 0; m < a.M; ++m) {
      const float* xm = a.x + m * a.K;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.K; ++k) acc += xm[k] * row[k];
      a.y[m * a.N + n] = acc;
    }
  }
}

}  // namespace qmm

static void add_bias(const Tensor* bias, int64_t M, int64_t N, Tensor& y) {
  if (!bias) return;
  const float* b = bias->ptr<float>();
  float* yp = y.ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) yp[m * N + n] += b[n];
}

void CpuBackend::qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) {
  quant::validate(w, "qmatmul weight");
  if (w.packed.device() != Device::kCPU) fail(ErrorCode::kInvalidArgument, "qmatmul: weight is not on the CPU");
  if (x.dtype() != DType::F32 || y.dtype() != DType::F32 || !x.is_contiguous() || !y.is_contiguous())
    fail(ErrorCode::kInvalidArgument, "qmatmul: x and y must be contiguous float32 on the CPU, got " + x.describe() + " and " + y.describe());
  const int64_t K = w.cols, N = w.rows;
  if (x.ndim() < 1 || x.dim(-1) != K)
    fail(ErrorCode::kInvalidArgument, "qmatmul: x " + x.describe() + " does not have " + std::to_string(K) + " columns");
  const int64_t M = x.numel() / K;
  if (y.numel() != M * N || y.dim(-1) != N)
    fail(ErrorCode::kInvalidArgument, "qmatmul: y " + y.describe() + " is not [" + std::to_string(M) + ", " + std::to_string(N) + "]");
  if (bias && (bias->numel() != N || bias->dtype() != DType::F32))
    fail(ErrorCode::kInvalidArgument, "qmatmul: bias must be float32 [" + std::to_string(N) + "], got " + bias->describe());
  if (M == 0) return;

  const CpuFeatures& f = cpu_features();
  void (*kernel)(const qmm::Args&, int64_t, int64_t) = qmm::kernel_scalar;
  if (f.avx512f && f.avx512bw && f.f16c) kernel = qmm::kernel_avx512;
  else if (f.avx2 && f.fma && f.f16c) kernel = qmm::kernel_avx2;

  bool use_int = kernel != qmm::kernel_scalar && f.avx2 && f.fma && qmm::int_kernel_for(w.bits);
  if (w.tile != 0 && !(use_int && qmm::q4_kernel_for(w.bits, w.group_size))) {
    kernel = qmm::kernel_scalar;  // a tiled weight: only the 4-bit plane kernels and the scalar one read tiles
    use_int = false;
  }
  qmm::Args a;
  a.w = &w;
  a.y = y.ptr<float>();
  a.M = M;
  a.N = N;
  a.K = K;
  const int64_t grain = 16;
  if (use_int) {
    // Per call scratch (this thread's, kept between calls): int16 activations, block scales and
    // group sums of x, and for the 4-bit kernel the byte planes.
    const int64_t block = qmm::int_block(w.bits, w.group_size);
    const bool q4 = qmm::q4_kernel_for(w.bits, w.group_size);
    const int64_t nq = M * K, nd = M * K / block, ng = M * (K / w.group_size);
    const int64_t bytes_q16 = (nq * 2 + 63) / 64 * 64, bytes_d = (nd * 4 + 63) / 64 * 64, bytes_g = (ng * 4 + 63) / 64 * 64;
    char* buf = scratch<char>(static_cast<size_t>(bytes_q16 + bytes_d + bytes_g + (q4 ? qmm::q4_plane_bytes(M, K) : 0)), 0);
    int16_t* q16 = reinterpret_cast<int16_t*>(buf);
    float* d = reinterpret_cast<float*>(buf + bytes_q16);
    float* gsum = reinterpret_cast<float*>(buf + bytes_q16 + bytes_d);
    qmm::quantize_acts_avx2(x.ptr<float>(), M, K, w.group_size, w.bits, q16, d, gsum);
    a.x = x.ptr<float>();
    if (q4) {
      int8_t* planes = reinterpret_cast<int8_t*>(buf + bytes_q16 + bytes_d + bytes_g);
      qmm::split_planes_avx2(q16, M, K, planes);
      qmm::Q4Acts acts;
      acts.planes = planes;
      acts.d = d;
      acts.gsum = gsum;
      const bool vnni = f.avx512f && f.avx512bw && f.avx512_vnni;
      parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
        if (vnni) qmm::kernel_avx512_q4(a, acts, n0, n1);
        else qmm::kernel_avx2_q4(a, acts, n0, n1);
      });
    } else {
      qmm::IntActs acts;
      acts.q16 = q16;
      acts.block = block;
      acts.d = d;
      acts.gsum = gsum;
      parallel_for(N, grain, [&](int64_t n0, int64_t n1) { qmm::kernel_avx2_int(a, acts, n0, n1); });
    }
    add_bias(bias, M, N, y);
    return;
  }
  std::vector<float> prepared;
  if (kernel != qmm::kernel_scalar && qmm::wants_nibble_order(w.bits)) {
    prepared.resize(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m) qmm::to_nibble_order(x.ptr<float>() + m * K, K, prepared.data() + m * K);
    a.x = prepared.data();
  } else {
    a.x = x.ptr<float>();
  }
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) { kernel(a, n0, n1); });
  add_bias(bias, M, N, y);
}

}  // namespace mlxb::cpu
