// CUDA quantized ops (qmatmul, qembedding) against the CPU reference and float64: every MLX bit
// width x group size, scales/biases in f32/bf16/f16, activations f32/bf16/f16, awkward shapes
// (odd N, M from 1 to 600: the GEMV path up to 8 rows, dequantize + dense matmul above).
// Weights come from our quantizer (quant::quantize, MLX's algorithm) on random matrices.
// - qmatmul: nMSE against float64 x · dequant(w)^T (the CPU's bit-exact dequantization), and
//   against the CPU backend's qmatmul for float32 activations;
// - qembedding: bit-equal to the CPU backend for every output dtype.
// Prints one line per case, exits non-zero on any failure; "skipped" without a GPU.
//   cuda_quant_check            all cases
//   cuda_quant_check --bench    also times the 4-bit kernels at Llama-3 8B / 1B shapes
//   cuda_quant_check --fused-bench  only the fused one-row ops against the ops they replace
//   cuda_quant_check --tma-bench    only the one-row timings of qgemv_tma and qgemv_tcp (variants 12, 13)
//   cuda_quant_check --row-bench    only the one-row timings of qgemv_row and qgemv_tcp (variants 14, 13)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/qgemv_row.h"
#include "backend/cuda/qgemv_tma.h"
#include "ops/ops.h"
#include "quant/affine.h"

#include "check.h"

using namespace mlxb;

namespace {

std::mt19937 rng(4321);
int failures = 0;

const char* dn(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }

float round_to(float v, DType d) {
  if (d == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (d == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// Host float32 values as a tensor of dtype d (values must already be representable).
Tensor host_tensor(const std::vector<float>& v, const Shape& shape, DType d) {
  Tensor t = Tensor::empty(shape, d, Device::kCPU);
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == DType::F32) t.ptr<float>()[i] = v[i];
    else if (d == DType::BF16) t.ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
    else t.ptr<uint16_t>()[i] = f32_to_f16(v[i]);
  }
  return t;
}

std::vector<float> to_host(const Tensor& t) {
  Tensor h = t.device() == Device::kCPU ? t : t.to(Device::kCPU);
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (h.dtype() == DType::F32) v[i] = h.ptr<float>()[i];
    else if (h.dtype() == DType::BF16) v[i] = bf16_to_f32(h.ptr<uint16_t>()[i]);
    else v[i] = f16_to_f32(h.ptr<uint16_t>()[i]);
  }
  return v;
}

std::vector<float> random_vec(int64_t n, float lo, float hi, DType d) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_to(u(rng), d);
  return v;
}

Tensor poisoned(const Shape& shape, DType d) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return host_tensor(std::vector<float>(static_cast<size_t>(n), NAN), shape, d).to(Device::kCUDA);
}

void report(const std::string& name, double e, double tol) {
  bool ok = e <= tol;
  if (!ok) ++failures;
  std::printf("%-4s %-78s nmse %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name.c_str(), e, tol);
}

QuantWeight to_device(const QuantWeight& w) {
  QuantWeight d = w;
  d.packed = w.packed.to(Device::kCUDA);
  d.scales = w.scales.to(Device::kCUDA);
  d.biases = w.biases.to(Device::kCUDA);
  return d;
}

// Random weights [n, k] quantized by our quantizer, on the CPU.
QuantWeight random_weight(int64_t n, int64_t k, int bits, int gs, DType sd) {
  std::vector<float> wv = random_vec(n * k, -0.5f, 0.5f, DType::F32);
  // A few constant and zero groups (the quantizer's edge cases) in the first rows.
  for (int64_t j = 0; j < gs && j < k; ++j) wv[j] = 0.25f;
  if (n > 1)
    for (int64_t j = 0; j < gs && j < k; ++j) wv[k + j] = 0.0f;
  return quant::quantize(host_tensor(wv, {n, k}, DType::F32), bits, gs, sd);
}

// ---------------------------------------------------------------- qmatmul
void check_qmatmul(int64_t m, int64_t n, int64_t k, int bits, int gs, DType sd, DType xd, bool with_bias) {
  QuantWeight wc = random_weight(n, k, bits, gs, sd);
  QuantWeight wd = to_device(wc);
  Tensor deq = Tensor::empty({n, k}, DType::F32);
  quant::dequantize(wc, deq);
  std::vector<float> xv = random_vec(m * k, -1.0f, 1.0f, xd);
  DType bd = xd == DType::F32 ? DType::BF16 : xd;  // a bias dtype other than x's too
  std::vector<float> bv = random_vec(n, -0.5f, 0.5f, bd);
  Tensor xdv = host_tensor(xv, {m, k}, xd).to(Device::kCUDA);
  Tensor bdv = host_tensor(bv, {n}, bd).to(Device::kCUDA);
  Tensor y = poisoned({m, n}, xd);
  ops::qmatmul(xdv, wd, with_bias ? &bdv : nullptr, y);
  std::vector<float> got = to_host(y);
  std::vector<double> ref(static_cast<size_t>(m * n));
  const float* dw = deq.ptr<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = with_bias ? bv[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) s += static_cast<double>(xv[i * k + kk]) * dw[j * k + kk];
      ref[i * n + j] = s;
    }
  char name[160];
  std::snprintf(name, sizeof name, "qmatmul %db g%d M=%ld N=%ld K=%ld scales=%s x=%s%s", bits, gs, (long)m, (long)n, (long)k, dn(sd), dn(xd),
                with_bias ? " +bias" : "");
  // f32: accumulation order only; bf16/f16: output rounding, and above 8 rows the dense matmul
  // on weights rounded to x's dtype.
  double tol = xd == DType::F32 ? 1e-7 : xd == DType::BF16 ? 2e-5 : 2e-6;
  report(name, nmse(got, ref), tol);
  if (xd == DType::F32) {
    Tensor cy = Tensor::empty({m, n}, DType::F32);
    Tensor cb = host_tensor(bv, {n}, DType::F32);
    ops::qmatmul(host_tensor(xv, {m, k}, DType::F32), wc, with_bias ? &cb : nullptr, cy);
    std::vector<float> cpu = to_host(cy);
    report(std::string(name) + " vs cpu", nmse(got, std::vector<double>(cpu.begin(), cpu.end())), 1e-7);
  }
}

// ---------------------------------------------------------------- qgated_matmul
double act_ref(double g, Activation a) {
  if (a == Activation::kSiLU) return g / (1.0 + std::exp(-g));
  if (a == Activation::kGeluExact) return 0.5 * g * (1.0 + std::erf(g * 0.70710678118654752));
  return 0.5 * g * (1.0 + std::tanh(0.79788456080286536 * (g + 0.044715 * g * g * g)));
}

// out[m, F] = act(gate) * up for a fused [gate; up] weight of 2F rows: against float64 (gate and
// up rounded to x's dtype as qmatmul would) and against the generic path (two qmatmuls and
// gated_act on the device, Backend::qgated_matmul).
void check_qgated(int64_t m, int64_t f, int64_t k, int gs, DType sd, DType xd, Activation act, bool with_bias) {
  QuantWeight wc = random_weight(2 * f, k, 4, gs, sd);
  QuantWeight wd = to_device(wc);
  Tensor deq = Tensor::empty({2 * f, k}, DType::F32);
  quant::dequantize(wc, deq);
  std::vector<float> xv = random_vec(m * k, -1.0f, 1.0f, xd);
  std::vector<float> bv = random_vec(2 * f, -0.5f, 0.5f, xd);
  Tensor xdv = host_tensor(xv, {m, k}, xd).to(Device::kCUDA);
  Tensor bdv = host_tensor(bv, {2 * f}, xd).to(Device::kCUDA);
  Tensor y = poisoned({m, f}, xd), y2 = poisoned({m, f}, xd);
  ops::qgated_matmul(xdv, wd, with_bias ? &bdv : nullptr, act, y);
  backend(Device::kCUDA).Backend::qgated_matmul(xdv, wd, with_bias ? &bdv : nullptr, act, y2);
  std::vector<float> got = to_host(y), generic = to_host(y2);
  std::vector<double> ref(static_cast<size_t>(m * f));
  const float* dw = deq.ptr<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      double gsum = with_bias ? bv[j] : 0.0, usum = with_bias ? bv[f + j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        gsum += static_cast<double>(xv[i * k + kk]) * dw[j * k + kk];
        usum += static_cast<double>(xv[i * k + kk]) * dw[(f + j) * k + kk];
      }
      ref[i * f + j] = act_ref(round_to(static_cast<float>(gsum), xd), act) * round_to(static_cast<float>(usum), xd);
    }
  char name[160];
  std::snprintf(name, sizeof name, "qgated_matmul 4b g%d M=%ld F=%ld K=%ld scales=%s x=%s act=%d%s", gs, (long)m, (long)f, (long)k, dn(sd),
                dn(xd), static_cast<int>(act), with_bias ? " +bias" : "");
  // Output rounding of act(gate) * up, and gate/up roundings that may land one ulp apart.
  const double tol = xd == DType::BF16 ? 4e-5 : 4e-6;
  report(name, nmse(got, ref), tol);
  report(std::string(name) + " vs generic", nmse(got, std::vector<double>(generic.begin(), generic.end())), tol);
}

// ---------------------------------------------------------------- qembedding
void check_qembedding(int64_t vocab, int64_t h, int64_t t, int bits, int gs, DType sd, DType od, float scale) {
  QuantWeight wc = random_weight(vocab, h, bits, gs, sd);
  QuantWeight wd = to_device(wc);
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  ids[0] = static_cast<int32_t>(vocab - 1);
  Tensor idc = Tensor::empty({t}, DType::I32);
  std::memcpy(idc.data(), ids.data(), ids.size() * 4);
  Tensor y = poisoned({t, h}, od);
  ops::qembedding(wd, idc.to(Device::kCUDA), scale, y);
  Tensor cy = Tensor::empty({t, h}, od);
  ops::qembedding(wc, idc, scale, cy);
  Tensor gy = y.to(Device::kCPU);
  bool exact = std::memcmp(gy.data(), cy.data(), static_cast<size_t>(cy.nbytes())) == 0;
  if (!exact) ++failures;
  std::printf("%-4s qembedding %db g%d V=%ld H=%ld T=%ld scales=%s out=%s scale=%.3f (bit-equal to cpu)\n", exact ? "ok" : "FAIL", bits, gs,
              (long)vocab, (long)h, (long)t, dn(sd), dn(od), scale);
}

// ---------------------------------------------------------------- fused one-row ops
// qmatmul_add, norm_qmatmul and norm_qgated_matmul against the ops they fuse, run unfused on the
// device: every output element must be bit-identical. main() sets MLXB_QFUSED_NORM=1 (the norm
// forms are opt-in) and MLXB_CUDA_FUSED_STRICT=1, so
// `covered` cases fail loudly if they fell back to the unfused ops, and the others must throw.
Tensor device_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::kCUDA);
  c.copy_from(t);
  return c;
}

// Runs f; with `covered`, f must not throw and `bad` elements must be 0; without, f must throw
// kUnsupported (strict mode: not covered by the fused kernel).
template <typename F>
void report_fused(const std::string& name, bool covered, F&& f) {
  bool ok = false;
  std::string what;
  try {
    const int64_t bad = f();
    ok = covered && bad == 0;
    what = std::to_string(bad) + " differing";
  } catch (const Error& e) {
    ok = !covered && e.code() == ErrorCode::kUnsupported;
    what = covered ? std::string("threw: ") + e.what() : "not covered (unfused ops)";
  }
  if (!ok) ++failures;
  std::printf("%-4s %-90s %s\n", ok ? "ok" : "FAIL", name.c_str(), what.c_str());
}

void check_qfused(int64_t n, int64_t k, int bits, int gs, DType sd, DType xd, bool with_bias, bool add_one, bool covered,
                  bool norm_covered) {
  QuantWeight w = to_device(random_weight(n, k, bits, gs, sd));
  Tensor x = host_tensor(random_vec(k, -3.0f, 3.0f, xd), {1, k}, xd).to(Device::kCUDA);
  Tensor nw = host_tensor(random_vec(k, 0.5f, 1.5f, xd), {k}, xd).to(Device::kCUDA);
  Tensor b = host_tensor(random_vec(n, -0.5f, 0.5f, xd), {n}, xd).to(Device::kCUDA);
  Tensor r = host_tensor(random_vec(n, -4.0f, 4.0f, xd), {1, n}, xd).to(Device::kCUDA);
  const Tensor* bp = with_bias ? &b : nullptr;
  const NormArgs norm{nw, 1e-5f, add_one};
  char tag[160];
  std::snprintf(tag, sizeof tag, "%db g%d N=%ld K=%ld scales=%s x=%s%s%s", bits, gs, (long)n, (long)k, dn(sd), dn(xd), with_bias ? " +bias" : "",
                add_one ? " 1+w" : "");
  report_fused(std::string("qmatmul_add ") + tag + " == qmatmul; add", covered, [&] {
    Tensor ref = device_copy(r), got = device_copy(r), branch = poisoned({1, n}, xd);
    ops::qmatmul(x, w, bp, branch);
    ops::add(ref, branch, ref);
    ops::qmatmul_add(x, w, bp, got);
    return mismatches(got, ref);
  });
  Tensor normed = poisoned({1, k}, xd);
  ops::rms_norm(x, nw, norm.eps, add_one, normed);
  report_fused(std::string("norm_qmatmul ") + tag + " == rms_norm; qmatmul", norm_covered, [&] {
    Tensor ref = poisoned({1, n}, xd), got = poisoned({1, n}, xd);
    ops::qmatmul(normed, w, bp, ref);
    ops::norm_qmatmul(x, norm, w, bp, got);
    return mismatches(got, ref);
  });
  if (n % 2 != 0) return;
  const Activation act = add_one ? Activation::kGeluTanh : Activation::kSiLU;
  report_fused(std::string("norm_qgated_matmul ") + tag + " == rms_norm; qgated_matmul", norm_covered, [&] {
    Tensor ref = poisoned({1, n / 2}, xd), got = poisoned({1, n / 2}, xd);
    ops::qgated_matmul(normed, w, bp, act, ref);
    ops::norm_qgated_matmul(x, norm, w, bp, act, got);
    return mismatches(got, ref);
  });
}

void check_qfused_all() {
  const DType B = DType::BF16, H = DType::F16;
  // rms_norm's three reduction widths (K < 512, < 2048, >= 2048) and its looped rows (K > 4096),
  // both group sizes and 16-bit scale dtypes, f16 x, bias, 1 + w, odd N (a partial tile), few rows
  // (K split 16 ways: 512-thread blocks), the 1B / 8B decode shapes, the longest normalised row.
  check_qfused(6144, 4096, 4, 64, B, B, false, false, true, true);
  check_qfused(3072, 2048, 4, 64, B, B, true, false, true, true);
  check_qfused(2048, 8192, 4, 64, B, B, false, false, true, true);
  check_qfused(1001, 1024, 4, 128, H, B, true, true, true, true);
  check_qfused(302, 256, 4, 64, B, H, false, true, true, true);
  check_qfused(16, 5120, 4, 128, B, H, true, false, true, true);
  check_qfused(130, 16384, 4, 64, H, H, false, false, true, true);
  // Not covered: 8-bit weights, group size 32, float32 scales; a row too long to normalise.
  check_qfused(256, 1024, 8, 64, B, B, false, false, false, false);
  check_qfused(256, 1024, 4, 32, B, B, false, false, false, false);
  check_qfused(256, 1024, 4, 64, DType::F32, B, false, false, false, false);
  check_qfused(64, 16640, 4, 64, B, B, false, false, true, false);  // the residual form is covered
}

// Bad input is a typed error, not a crash.
void check_errors() {
  QuantWeight wd = to_device(random_weight(64, 128, 4, 64, DType::BF16));
  Tensor x = poisoned({2, 96}, DType::BF16), y = poisoned({2, 64}, DType::BF16);
  bool ok = false;
  try {
    ops::qmatmul(x, wd, nullptr, y);
  } catch (const Error& e) {
    ok = e.code() == ErrorCode::kInvalidArgument;
  }
  if (!ok) ++failures;
  std::printf("%-4s qmatmul with x of the wrong width is a typed kInvalidArgument\n", ok ? "ok" : "FAIL");
  QuantWeight bad = wd;
  bad.bits = 7;
  ok = false;
  try {
    ops::qmatmul(poisoned({2, 128}, DType::BF16), bad, nullptr, y);
  } catch (const Error& e) {
    ok = e.code() == ErrorCode::kUnsupported;
  }
  if (!ok) ++failures;
  std::printf("%-4s qmatmul with 7-bit weights is a typed kUnsupported\n", ok ? "ok" : "FAIL");
}

// ---------------------------------------------------------------- timing
// A device weight of random packed words and plausible scales (timing does not need a real
// quantization; building one for 128256 x 4096 on the host would dominate the run).
QuantWeight random_device_weight(int64_t n, int64_t k, int bits, int gs) {
  QuantWeight w;
  w.bits = bits;
  w.group_size = gs;
  w.rows = n;
  w.cols = k;
  Tensor p = Tensor::empty({n, quant::packed_cols(k, bits)}, DType::U32);
  uint32_t s = 12345;
  uint32_t* pp = p.ptr<uint32_t>();
  for (int64_t i = 0; i < p.numel(); ++i) pp[i] = (s = s * 1664525u + 1013904223u);
  Tensor sc = Tensor::empty({n, k / gs}, DType::BF16), bi = Tensor::empty({n, k / gs}, DType::BF16);
  for (int64_t i = 0; i < sc.numel(); ++i) {
    sc.ptr<uint16_t>()[i] = f32_to_bf16(0.01f);
    bi.ptr<uint16_t>()[i] = f32_to_bf16(-0.08f);
  }
  w.packed = p.to(Device::kCUDA);
  w.scales = sc.to(Device::kCUDA);
  w.biases = bi.to(Device::kCUDA);
  return w;
}

// The kernel variants timed (MLXB_QGEMV_VARIANT; 3-6 were slower on the H200 and are left out;
// 12 is qgemv_tma, 13 qgemv_tcp, 14 qgemv_row: the one-row kernels).
constexpr int kBenchVariants[] = {0, 2, 7, 8, 9, 10, 11, 12, 13, 14};

// only: 0 all variants, else the one-row pair timed alone (12 and 13, or 14 and 13).
void bench(int only) {
  const bool tma_only = only != 0;
  auto skip = [&](int v) { return only != 0 && v != only && v != 13; };
  std::printf("\n-- timing (bf16 activations, bf16 scales; weights rotated over copies so runs do not hit L2)\n");
  struct G { int64_t n, k; const char* what; int bits; } gs[] = {
      {6144, 4096, "8B qkv", 4}, {4096, 4096, "8B o", 4}, {28672, 4096, "8B gate+up", 4}, {14336, 4096, "8B gate", 4},
      {4096, 14336, "8B down", 4}, {128256, 4096, "8B lm_head", 4},
      {3072, 2048, "1B qkv", 4}, {2048, 2048, "1B o", 4}, {16384, 2048, "1B gate+up", 4}, {2048, 8192, "1B down", 4},
      {128256, 2048, "1B lm_head", 4},
      {14336, 4096, "8B gate", 2}, {14336, 4096, "8B gate", 3}, {14336, 4096, "8B gate", 5}, {14336, 4096, "8B gate", 6},
      {14336, 4096, "8B gate", 8}};
  for (auto& g : gs) {
    if (tma_only && g.bits != 4) continue;
    // Enough copies to pass 256 MB per round (the H200's L2 holds 50 MB).
    const int64_t one = g.n * g.k * g.bits / 8;
    const int copies = static_cast<int>(std::min<int64_t>(128, std::max<int64_t>(2, (int64_t(256) << 20) / one + 1)));
    std::vector<QuantWeight> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(random_device_weight(g.n, g.k, g.bits, 64));
    const double bytes = static_cast<double>(ws[0].packed.nbytes() + ws[0].scales.nbytes() + ws[0].biases.nbytes());
    if (g.bits == 4 && (std::strcmp(g.what, "8B gate+up") == 0 || std::strcmp(g.what, "1B gate+up") == 0)) {
      Tensor x = host_tensor(random_vec(g.k, -1, 1, DType::BF16), {1, g.k}, DType::BF16).to(Device::kCUDA);
      Tensor y = Tensor::empty({1, g.n / 2}, DType::BF16, Device::kCUDA);
      for (int v : kBenchVariants) {
        if (v == 2 || skip(v)) continue;  // the CUDA-core GEMV has no gated form
        setenv("MLXB_QGEMV_VARIANT", std::to_string(v).c_str(), 1);
        int i = 0;
        double ms = time_ms([&] { ops::qgated_matmul(x, ws[i++ % copies], nullptr, Activation::kSiLU, y); }, 200);
        std::printf("qgated 4b g64 M=1 %-11s N=%6ld K=%6ld  %8.1f us  %7.0f GB/s%s\n", g.what, (long)g.n, (long)g.k, ms * 1e3,
                    bytes / (ms * 1e-3) / 1e9, v == 0 ? "" : (" (variant " + std::to_string(v) + ")").c_str());
      }
      unsetenv("MLXB_QGEMV_VARIANT");
    }
    // M = 1 and 4 with the default kernel; for 4 bits and M = 1 also the other variants
    // (MLXB_QGEMV_VARIANT, see backend/cuda/qmm.cuh).
    for (int v : kBenchVariants) {
      for (int64_t m : {1, 4}) {
        if ((v > 0 && (m > 1 || g.bits != 4)) || (tma_only && (m > 1 || skip(v)))) continue;
        setenv("MLXB_QGEMV_VARIANT", std::to_string(v).c_str(), 1);
        Tensor x = host_tensor(random_vec(m * g.k, -1, 1, DType::BF16), {m, g.k}, DType::BF16).to(Device::kCUDA);
        Tensor y = Tensor::empty({m, g.n}, DType::BF16, Device::kCUDA);
        int i = 0;
        double ms = time_ms([&] { ops::qmatmul(x, ws[i++ % copies], nullptr, y); }, 200);
        std::printf("qgemv %db g64 M=%ld %-11s N=%6ld K=%6ld  %8.1f us  %7.0f GB/s%s\n", g.bits, (long)m, g.what, (long)g.n, (long)g.k,
                    ms * 1e3, bytes / (ms * 1e-3) / 1e9, v == 0 ? "" : (" (variant " + std::to_string(v) + ")").c_str());
      }
    }
    unsetenv("MLXB_QGEMV_VARIANT");
    if (g.bits == 4 && g.n != 128256 && !tma_only) {
      Tensor x = host_tensor(random_vec(512 * g.k, -1, 1, DType::BF16), {512, g.k}, DType::BF16).to(Device::kCUDA);
      Tensor y = Tensor::empty({512, g.n}, DType::BF16, Device::kCUDA);
      double ms = time_ms([&] { ops::qmatmul(x, ws[0], nullptr, y); }, 30);
      Tensor dense = Tensor::empty({g.n, g.k}, DType::BF16, Device::kCUDA);
      double mm = time_ms([&] { ops::matmul(x, dense, nullptr, y); }, 30);
      std::printf("qmm   4b g64 M=512 %-11s N=%6ld K=%6ld  %8.1f us  %6.1f TFLOP/s  (dense bf16 matmul alone %.1f us)\n", g.what, (long)g.n,
                  (long)g.k, ms * 1e3, 2.0 * 512 * g.n * g.k / (ms * 1e-3) / 1e12, mm * 1e3);
    }
  }
}

// The fused one-row ops against the ops they replace at Llama-3 1B / 8B decode shapes (4-bit g64,
// bf16; weights rotated over copies so runs do not hit L2).
void bench_fused() {
  std::printf("\n-- fused one-row quantized ops (unfused = the ops they replace)\n");
  struct S { const char* name; int64_t h, ffn, qkv, qd; } shapes[] = {{"1B", 2048, 8192, 3072, 2048}, {"8B", 4096, 14336, 6144, 4096}};
  const DType B = DType::BF16;
  for (const S& s : shapes) {
    constexpr int kCopies = 8;
    std::vector<QuantWeight> wqkv, wo, wgu, wdown;
    for (int i = 0; i < kCopies; ++i) {
      wqkv.push_back(random_device_weight(s.qkv, s.h, 4, 64));
      wo.push_back(random_device_weight(s.h, s.qd, 4, 64));
      wgu.push_back(random_device_weight(2 * s.ffn, s.h, 4, 64));
      wdown.push_back(random_device_weight(s.h, s.ffn, 4, 64));
    }
    auto dev = [&](int64_t n, float lo, float hi) { return host_tensor(random_vec(n, lo, hi, B), {1, n}, B).to(Device::kCUDA); };
    Tensor x = dev(s.h, -1, 1), nw = dev(s.h, 0.5f, 1.5f).reshape({s.h}), normed = dev(s.h, 0, 0), branch = dev(s.h, 0, 0);
    Tensor qkv = dev(s.qkv, 0, 0), o = dev(s.qd, -1, 1), h = dev(s.ffn, -1, 1), g = dev(s.ffn, 0, 0);
    const NormArgs norm{nw, 1e-5f, false};
    int i = 0;
    auto row = [&](const char* what, double u, double f) {
      std::printf("%s %-22s unfused %7.1f us  fused %7.1f us\n", s.name, what, u * 1e3, f * 1e3);
    };
    double u = time_ms([&] { ops::rms_norm(x, nw, 1e-5f, false, normed); ops::qmatmul(normed, wqkv[i++ % kCopies], nullptr, qkv); }, 200);
    double f = time_ms([&] { ops::norm_qmatmul(x, norm, wqkv[i++ % kCopies], nullptr, qkv); }, 200);
    row("norm + qkv", u, f);
    u = time_ms([&] { ops::qmatmul(o, wo[i++ % kCopies], nullptr, branch); ops::add(x, branch, x); }, 200);
    f = time_ms([&] { ops::qmatmul_add(o, wo[i++ % kCopies], nullptr, x); }, 200);
    row("o + residual", u, f);
    u = time_ms([&] { ops::rms_norm(x, nw, 1e-5f, false, normed); ops::qgated_matmul(normed, wgu[i++ % kCopies], nullptr, Activation::kSiLU, g); },
                200);
    f = time_ms([&] { ops::norm_qgated_matmul(x, norm, wgu[i++ % kCopies], nullptr, Activation::kSiLU, g); }, 200);
    row("norm + gate/up + act", u, f);
    u = time_ms([&] { ops::qmatmul(h, wdown[i++ % kCopies], nullptr, branch); ops::add(x, branch, x); }, 200);
    f = time_ms([&] { ops::qmatmul_add(h, wdown[i++ % kCopies], nullptr, x); }, 200);
    row("down + residual", u, f);
  }
}

// One launch of each GEMV variant on the 8B gate+up shape (for a profiler: --profile).
void profile() {
  QuantWeight w = random_device_weight(28672, 4096, 4, 64);
  Tensor x = host_tensor(random_vec(4096, -1, 1, DType::BF16), {1, 4096}, DType::BF16).to(Device::kCUDA);
  Tensor y = Tensor::empty({1, 28672}, DType::BF16, Device::kCUDA);
  for (int v : kBenchVariants) {
    setenv("MLXB_QGEMV_VARIANT", std::to_string(v).c_str(), 1);
    ops::qmatmul(x, w, nullptr, y);
  }
  unsetenv("MLXB_QGEMV_VARIANT");
  backend(Device::kCUDA).synchronize();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a hang or trap still shows the last case that ran
  if (skip_without_cuda()) return 0;
  bool do_bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--tma-bench") == 0) {  // only the two one-row defaults, M = 1
    bench(12);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--row-bench") == 0) {  // qgemv_row against qgemv_tcp, M = 1
    bench(14);
    return 0;
  }
  const bool fused_bench = argc > 1 && std::strcmp(argv[1], "--fused-bench") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--profile") == 0) {
    profile();
    return 0;
  }
  try {
    const DType F = DType::F32, B = DType::BF16, H = DType::F16;
    const DType sds[] = {F, B, H}, xds[] = {B, F, H};
    const int64_t ms[] = {1, 2, 3, 5, 8, 9, 33};
    int idx = 0;
    // Every width x group size x scale dtype, with the activation dtype and row count rotating.
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int gs : {32, 64, 128})
        for (DType sd : sds) {
          const int64_t m = ms[idx % 7];
          const DType xd = xds[(idx / 7 + idx) % 3];
          check_qmatmul(m, 257, 384, bits, gs, sd, xd, idx % 2 == 0);
          ++idx;
        }
    // Every row count of the GEMV, both sides of the switch to the dense path, large M.
    for (int64_t m = 1; m <= 10; ++m) check_qmatmul(m, 1001, 1024, 4, 64, B, B, m % 3 == 0);
    for (int bits : {2, 3, 5, 6, 8}) check_qmatmul(1, 515, 640, bits, 64, B, B, false);
    for (int bits : {3, 4, 8}) check_qmatmul(600, 129, 512, bits, 64, B, B, true);
    check_qmatmul(600, 77, 256, 4, 128, F, F, false);
    check_qmatmul(37, 300, 256, 6, 32, H, H, true);
    check_qmatmul(1, 4096, 4096, 4, 64, B, B, false);
    check_qmatmul(4, 2048, 8192, 4, 64, B, F, false);
    // Tensor-core 4-bit GEMV: every group size and 16-bit activation dtype, M = 1..8, odd N, a
    // long K (split between warps, with a tail of groups), and the gated form.
    idx = 0;
    for (int gs : {32, 64, 128})
      for (DType xd : {B, H})
        for (int64_t m : {1, 3, 8}) {
          check_qmatmul(m, 300 + idx, 1024, 4, gs, sds[idx % 3], xd, idx % 2 == 0);
          ++idx;
        }
    check_qmatmul(1, 77, 14336, 4, 64, B, B, false);
    check_qmatmul(5, 130, 8192, 4, 128, H, H, true);
    idx = 0;
    for (int gs : {32, 64, 128})
      for (DType xd : {B, H}) {
        const Activation acts[] = {Activation::kSiLU, Activation::kGeluExact, Activation::kGeluTanh};
        check_qgated(1 + idx % 3 * 3, 203 + idx, 512, gs, sds[idx % 3], xd, acts[idx % 3], idx % 2 == 1);
        ++idx;
      }
    check_qgated(1, 1000, 4096, 64, B, B, Activation::kSiLU, false);
    // One row of x (qgemv_tma by default where it fits, else qgemv_tcp): both 16-bit scale dtypes, both group sizes, odd N
    // (a partial last tile), bias, K from 1 stage per warp to many, one tile (K split 16 ways).
    idx = 0;
    for (int gs : {64, 128})
      for (DType sd : {B, H})
        for (DType xd : {B, H}) {
          const Activation acts[] = {Activation::kSiLU, Activation::kGeluExact, Activation::kGeluTanh};
          check_qmatmul(1, 5 + 131 * idx, 256 * (1 + 3 * idx), 4, gs, sd, xd, idx % 2 == 1);
          check_qgated(1, 3 + 77 * idx, 256 * (2 + 5 * idx), gs, sd, xd, acts[idx % 3], idx % 2 == 0);
          ++idx;
        }
    check_qmatmul(1, 16, 14336, 4, 64, H, B, true);
    // Runs longer than qgemv_tma's ring of 16 stages per block (the slots are reused): ~4 tiles of
    // 14 stages, ~4 gated tiles of 6.
    check_qmatmul(1, 8192, 14336, 4, 64, B, B, true);
    check_qgated(1, 4100, 6144, 64, H, H, Activation::kGeluExact, true);
    check_qgated(10, 64, 256, 64, B, B, Activation::kSiLU, true);  // above 8 rows: the generic path
    check_qgated(2, 40, 256, 64, B, F, Activation::kSiLU, false);  // f32 activations: generic path
    // qembedding: every width, group size, scale and output dtype, bit-exact.
    idx = 0;
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int gs : {32, 64, 128}) {
        check_qembedding(301, 384, 9, bits, gs, sds[idx % 3], xds[idx % 3], idx % 2 ? 1.0f : 45.25f);
        ++idx;
      }
    for (DType od : {F, B, H}) check_qembedding(1000, 2048, 17, 4, 64, B, od, 1.0f);
    // Shapes qgemv_row takes (K a multiple of 8 groups; odd N: a partial last unit of 4 rows or
    // 2 gated outputs; K split from 1 to 8 ways; both 16-bit scale and activation dtypes).
    idx = 0;
    for (int gs : {64, 128})
      for (DType sd : {B, H})
        for (DType xd : {B, H}) {
          const Activation acts[] = {Activation::kSiLU, Activation::kGeluExact, Activation::kGeluTanh};
          check_qmatmul(1, 1 + 37 * idx, 8 * gs * (1 + idx % 4), 4, gs, sd, xd, idx % 2 == 0);
          check_qgated(1, 1 + 29 * idx, 8 * gs * (1 + (idx + 2) % 4), gs, sd, xd, acts[idx % 3], idx % 2 == 1);
          ++idx;
        }
    check_qmatmul(1, 6, 16384, 4, 128, B, B, true);
    check_qmatmul(1, 4099, 2048, 4, 64, B, B, false);
    check_errors();
    setenv("MLXB_CUDA_FUSED_STRICT", "1", 1);  // both read once, at the first fused op
    setenv("MLXB_QFUSED_NORM", "1", 1);
    check_qfused_all();
    // On sm_90+ the one-row cases above that fit qgemv_tma (group size 64, 16-bit scales, K a
    // multiple of 512) ran it, not the older kernels.
    const int64_t tma = cuda::qmm::qgemv_tma_launches();
    const bool tma_ok = !cuda::qmm::qgemv_tma_available() || tma > 0;
    if (!tma_ok) ++failures;
    std::printf("%-4s qgemv_tma ran %ld times%s\n", tma_ok ? "ok" : "FAIL", static_cast<long>(tma),
                cuda::qmm::qgemv_tma_available() ? "" : " (not available here)");
    // With MLXB_QGEMV_ROW=1 the one-row cases above that fit qgemv_row ran it.
    const int64_t row = cuda::qmm::qgemv_row_launches();
    const bool row_ok = !cuda::qmm::qgemv_row_enabled() || row > 0;
    if (!row_ok) ++failures;
    std::printf("%-4s qgemv_row ran %ld times%s\n", row_ok ? "ok" : "FAIL", static_cast<long>(row),
                cuda::qmm::qgemv_row_enabled() ? "" : " (not on: MLXB_QGEMV_ROW=1)");
    if (do_bench) bench(0);
    if (do_bench || fused_bench) bench_fused();
  } catch (const Error& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  return exit_status(failures);
}
