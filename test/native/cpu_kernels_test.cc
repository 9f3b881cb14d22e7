// Native test of the CPU kernel families against a double-precision reference written here:
// matmul (GEMV and GEMM shapes, f32/bf16/f16 weights, bias, and batch invariance: rows bit for
// bit independent of M) for every SIMD family this CPU runs (AVX2, AVX-512 exact and bf16-dot)
// and for plain-array models of the AVX-512 modes (any CPU), AVX2 attention and gated activations
// against the plain reference, and the four-row block weight layout (weight_layout.h: matmul and
// embedding give the row-major weight's bits). Needs no Node, so it can run on any x86-64 host (e.g. one with
// AVX-512, which the development VM lacks). Prints "ok"/"skip" lines; exits non-zero on failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_ordered.h"
#include "backend/cpu/qmatmul.h"
#include "backend/cpu/weight_layout.h"
#include "core/tensor.h"
#include "core/cpu_features.h"
#include "ops/ops.h"
#include "quant/affine.h"

using namespace mlxb;
using namespace mlxb::cpu;

static int failures = 0;

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  double uniform() {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  }
  float normal() { return static_cast<float>(std::sqrt(-2 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform())); }
};

// Weights stored in dtype `t` with their exact float values.
struct Weights {
  std::vector<uint16_t> h;
  std::vector<float> f, vals;
  const void* data(DType t) const { return t == DType::F32 ? static_cast<const void*>(f.data()) : h.data(); }
};

static Weights make_weights(Rng& r, int64_t n, DType t) {
  Weights w;
  w.vals.resize(n);
  if (t == DType::F32) w.f.resize(n); else w.h.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float v = 0.1f * r.normal();
    if (t == DType::F32) { w.f[i] = v; w.vals[i] = v; }
    else if (t == DType::BF16) { w.h[i] = f32_to_bf16(v); w.vals[i] = bf16_to_f32(w.h[i]); }
    else { w.h[i] = f32_to_f16(v); w.vals[i] = f16_to_f32(w.h[i]); }
  }
  return w;
}

using MatmulFn = void (*)(const float*, const void*, DType, const float*, float*, int64_t, int64_t, int64_t);

static void avx512_exact(const float* x, const void* w, DType t, const float* b, float* y, int64_t m, int64_t n, int64_t k) {
  avx512::matmul(x, w, t, b, y, m, n, k, false);
}
static void avx512_bf16dot(const float* x, const void* w, DType t, const float* b, float* y, int64_t m, int64_t n, int64_t k) {
  avx512::matmul(x, w, t, b, y, m, n, k, true);
}

// Plain-array models of the two AVX-512 vector modes of matmul_ordered.h (the same lane
// arithmetic: one fma per lane, hsum16's pairing order), so its GEMV / tiled GEMM logic (packing,
// chunks, blocks, tails, parked accumulators) is checked on any CPU, not only on AVX-512 hosts.
struct Emu16 {
  struct R { float v[16]; };
  using acc_t = R;
  using xv_t = R;
  using wv_t = R;
  using xin_t = float;
  using win_t = float;
  static constexpr int kStep = 16, kAccFloats = 16, kMT = 6, kRT = 4;
  static R zero() { return R{}; }
  static R load_acc(const float* p) { R r; std::memcpy(r.v, p, sizeof r.v); return r; }
  static void store_acc(float* p, const R& r) { std::memcpy(p, r.v, sizeof r.v); }
  static R load_x(const float* p) { return load_acc(p); }
  static R load_packed_w(const float* p) { return load_acc(p); }
  template <DType T>
  static R load_w(const void* b, int64_t i) {
    R r;
    for (int l = 0; l < 16; ++l) r.v[l] = ordered::weight_at<T>(b, i + l);
    return r;
  }
  template <DType T>
  static void pack_w(const void* b, int64_t i, float* d) { store_acc(d, load_w<T>(b, i)); }
  static void pack_x(const float* s, int64_t count, float* d) { std::memcpy(d, s, static_cast<size_t>(count) * 4); }
  static R madd(R a, const R& x, const R& w) {
    for (int l = 0; l < 16; ++l) a.v[l] = std::fma(x.v[l], w.v[l], a.v[l]);
    return a;
  }
  static float hsum(const R& a) {
    float h[8], q[4];
    for (int i = 0; i < 8; ++i) h[i] = a.v[i] + a.v[i + 8];
    for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
  }
  static float round_x(float v) { return v; }
  static void pin(R&) {}
};

struct EmuPair {  // bf16 activations and weights, 32 per step, lane l takes elements 2l and 2l+1
  struct H { uint16_t v[32]; };
  using acc_t = Emu16::R;
  using xv_t = H;
  using wv_t = H;
  using xin_t = uint16_t;
  using win_t = uint16_t;
  static constexpr int kStep = 32, kAccFloats = 16, kMT = 6, kRT = 4;
  static acc_t zero() { return acc_t{}; }
  static acc_t load_acc(const float* p) { return Emu16::load_acc(p); }
  static void store_acc(float* p, const acc_t& r) { Emu16::store_acc(p, r); }
  static H load_x(const uint16_t* p) { H h; std::memcpy(h.v, p, sizeof h.v); return h; }
  static H load_packed_w(const uint16_t* p) { return load_x(p); }
  template <DType T>
  static H load_w(const void* b, int64_t i) { return load_x(static_cast<const uint16_t*>(b) + i); }
  template <DType T>
  static void pack_w(const void* b, int64_t i, uint16_t* d) { std::memcpy(d, static_cast<const uint16_t*>(b) + i, 64); }
  static void pack_x(const float* s, int64_t count, uint16_t* d) {
    for (int64_t i = 0; i < count; ++i) d[i] = f32_to_bf16(s[i]);
  }
  static acc_t madd(acc_t a, const H& x, const H& w) {
    for (int l = 0; l < 16; ++l)
      a.v[l] = std::fma(bf16_to_f32(x.v[2 * l + 1]), bf16_to_f32(w.v[2 * l + 1]),
                        std::fma(bf16_to_f32(x.v[2 * l]), bf16_to_f32(w.v[2 * l]), a.v[l]));
    return a;
  }
  static float hsum(const acc_t& a) { return Emu16::hsum(a); }
  static float round_x(float v) { return bf16_to_f32(f32_to_bf16(v)); }
  static void pin(H&) {}
};

static void emu16(const float* x, const void* w, DType t, const float* b, float* y, int64_t m, int64_t n, int64_t k) {
  ordered::matmul<Emu16>(x, w, t, b, y, m, n, k);
}
static void emu_pair(const float* x, const void* w, DType t, const float* b, float* y, int64_t m, int64_t n, int64_t k) {
  if (t != DType::BF16) ordered::matmul<Emu16>(x, w, t, b, y, m, n, k);
  else if (m <= 4) ordered::gemv<EmuPair, DType::BF16>(x, w, b, y, m, n, k);
  else ordered::gemm<EmuPair, DType::BF16>(x, w, b, y, m, n, k);
}

static void check_matmul(const char* family, MatmulFn fn, double rtol_bf16) {
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 33}, {2, 129, 96}, {3, 17, 65}, {4, 40, 300}, {5, 64, 128}, {12, 32, 256},
                               {13, 33, 257}, {17, 33, 100}, {64, 96, 80}, {130, 70, 513}, {33, 257, 31}, {25, 100, 1},
                               {13, 90, 1100}, {3, 45, 2100}, {37, 170, 1300}};
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2];
      Rng r(static_cast<uint64_t>(m * 1000003 + n * 1009 + k));
      std::vector<float> x(m * k), bias(n), y(m * n, NAN);
      for (float& v : x) v = r.normal();
      for (float& v : bias) v = r.normal();
      Weights w = make_weights(r, n * k, t);
      const bool with_bias = (m + n) % 2 == 1;
      fn(x.data(), w.data(t), t, with_bias ? bias.data() : nullptr, y.data(), m, n, k);
      const double rtol = t == DType::BF16 ? rtol_bf16 : 2e-6;  // rtol_bf16: families that round activations
      double worst = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = with_bias ? bias[j] : 0.0, mag = with_bias ? std::fabs(bias[j]) : 0.0;
          for (int64_t p = 0; p < k; ++p) {
            acc += static_cast<double>(x[i * k + p]) * w.vals[j * k + p];
            mag += std::fabs(static_cast<double>(x[i * k + p]) * w.vals[j * k + p]);
          }
          const double err = std::fabs(y[i * n + j] - acc) / (1e-6 + rtol * mag);
          if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
        }
      if (!(worst <= 1.0)) {
        std::fprintf(stderr, "FAILED %s matmul %s M=%lld N=%lld K=%lld: error %.3g x tolerance\n", family, dtype_name(t),
                     (long long)m, (long long)n, (long long)k, worst);
        ++failures;
      }
    }
  }
  std::printf("ok %s matmul\n", family);
}

// Batch invariance: every row of an M-row matmul is bit for bit the row computed alone (M = 1),
// and in a 3-row GEMV, and in the GEMM of the remaining rows, for every weight dtype.
static void check_invariance(const char* family, MatmulFn fn) {
  const int64_t shapes[][3] = {{5, 33, 100}, {9, 7, 31}, {13, 90, 1100}, {37, 170, 1300}, {70, 40, 513}, {8, 5, 7}};
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2];
      Rng r(static_cast<uint64_t>(m * 7 + n * 11 + k));
      std::vector<float> x(m * k), bias(n), all(m * n, NAN), part(m * n, NAN);
      for (float& v : x) v = r.normal();
      for (float& v : bias) v = r.normal();
      Weights w = make_weights(r, n * k, t);
      const float* b = k % 2 ? bias.data() : nullptr;
      fn(x.data(), w.data(t), t, b, all.data(), m, n, k);
      bool same = true;
      for (int64_t i = 0; i < m && same; ++i) {
        fn(x.data() + i * k, w.data(t), t, b, part.data() + i * n, 1, n, k);
        same = std::memcmp(part.data() + i * n, all.data() + i * n, n * sizeof(float)) == 0;
      }
      fn(x.data(), w.data(t), t, b, part.data(), 3, n, k);
      fn(x.data() + 3 * k, w.data(t), t, b, part.data() + 3 * n, m - 3, n, k);
      same = same && std::memcmp(part.data(), all.data(), all.size() * sizeof(float)) == 0;
      if (!same) {
        std::fprintf(stderr, "FAILED %s batch invariance %s M=%lld N=%lld K=%lld\n", family, dtype_name(t), (long long)m,
                     (long long)n, (long long)k);
        ++failures;
      }
    }
  }
  std::printf("ok %s batch invariance\n", family);
}

// ops::prepare_weight's four-row block layout (bf16-dot CPUs): matmul at every M (GEMV and GEMM)
// and embedding rows are bit for bit those of the row-major weight; shapes that do not fit the
// layout, and other dtypes, come back unchanged.
static void check_blocked_layout() {
  const int64_t shapes[][2] = {{8, 32}, {36, 96}, {64, 2048}, {12, 8192}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], k = s[1];
    Rng r(static_cast<uint64_t>(n * 31 + k));
    Weights wv = make_weights(r, n * k, DType::BF16);
    Tensor w = Tensor::empty({n, k}, DType::BF16);
    std::memcpy(w.data(), wv.h.data(), static_cast<size_t>(n * k) * 2);
    Tensor wb = ops::prepare_weight(w);
    if (!is_blocked_weight(wb) || wb.dim(0) * 4 != n || wb.dim(1) * 32 != k) {
      std::fprintf(stderr, "FAILED blocked layout: bf16 [%lld, %lld] not blocked\n", (long long)n, (long long)k);
      ++failures;
      continue;
    }
    Tensor bias = Tensor::empty({n}, DType::F32);
    for (int64_t j = 0; j < n; ++j) bias.ptr<float>()[j] = r.normal();
    for (int64_t m : {1, 2, 3, 4, 5, 9, 13}) {
      Tensor x = Tensor::empty({m, k}, DType::F32);
      for (int64_t i = 0; i < m * k; ++i) x.ptr<float>()[i] = r.normal();
      for (const Tensor* b : {static_cast<const Tensor*>(nullptr), static_cast<const Tensor*>(&bias)}) {
        Tensor y0 = Tensor::empty({m, n}, DType::F32), y1 = Tensor::empty({m, n}, DType::F32);
        ops::matmul(x, w, b, y0);
        ops::matmul(x, wb, b, y1);
        if (std::memcmp(y0.data(), y1.data(), static_cast<size_t>(m * n) * 4) != 0) {
          std::fprintf(stderr, "FAILED blocked layout matmul M=%lld N=%lld K=%lld%s\n", (long long)m, (long long)n, (long long)k,
                       b ? " bias" : "");
          ++failures;
        }
      }
    }
    std::vector<int32_t> ids = {0, static_cast<int32_t>(n - 1), static_cast<int32_t>(n / 2), 1, 2, 3};
    Tensor idt = Tensor::wrap(ids.data(), {static_cast<int64_t>(ids.size())}, DType::I32);
    Tensor e0 = Tensor::empty({static_cast<int64_t>(ids.size()), k}, DType::F32), e1 = e0.astype(DType::F32);
    ops::embedding(w, idt, 0.5f, e0);
    ops::embedding(wb, idt, 0.5f, e1);
    if (std::memcmp(e0.data(), e1.data(), static_cast<size_t>(e0.nbytes())) != 0) {
      std::fprintf(stderr, "FAILED blocked layout embedding N=%lld K=%lld\n", (long long)n, (long long)k);
      ++failures;
    }
  }
  Tensor odd = Tensor::empty({6, 64}, DType::BF16), f32 = Tensor::empty({8, 64}, DType::F32);
  if (ops::prepare_weight(odd).ndim() != 2 || ops::prepare_weight(f32).ndim() != 2) {
    std::fprintf(stderr, "FAILED blocked layout: a weight that does not fit was blocked\n");
    ++failures;
  }
  std::printf("ok four-row block weight layout\n");
}

static void check_attention() {
  struct Case { int64_t t, hq, hkv, d, s, window; float softcap; DType kv; };
  const Case cases[] = {{1, 8, 2, 64, 37, 0, 0, DType::F32}, {33, 4, 2, 16, 33, 0, 0, DType::F32}, {9, 4, 4, 36, 25, 7, 0, DType::BF16},
                        {6, 4, 2, 24, 6, 0, 5, DType::F16}, {2, 8, 1, 128, 70, 16, 0, DType::BF16}, {5, 3, 1, 9, 5, 0, 0, DType::F32}};
  for (const Case& c : cases) {
    Rng r(static_cast<uint64_t>(c.t * 31 + c.s));
    std::vector<float> q(c.t * c.hq * c.d), ref(c.t * c.hq * c.d), out(c.t * c.hq * c.d);
    for (float& v : q) v = r.normal();
    Weights k = make_weights(r, c.hkv * c.s * c.d, c.kv), v = make_weights(r, c.hkv * c.s * c.d, c.kv);
    std::vector<int32_t> qp(c.t), kp(c.s);
    for (int64_t i = 0; i < c.s; ++i) kp[i] = static_cast<int32_t>((i * 7) % c.s);
    if (c.s > 3) kp[2] = -1;
    for (int64_t i = 0; i < c.t; ++i) qp[i] = static_cast<int32_t>(c.s - c.t + i);
    AttentionView a;
    a.q = q.data(); a.k = static_cast<const char*>(k.data(c.kv)); a.v = static_cast<const char*>(v.data(c.kv));
    a.kv_dtype = c.kv; a.k_elem = dtype_size(c.kv); a.k_stride0 = a.v_stride0 = c.s * c.d;
    a.q_pos = qp.data(); a.k_pos = kp.data(); a.t = c.t; a.hq = c.hq; a.hkv = c.hkv; a.s = c.s; a.d = c.d; a.dv = c.d;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.d)); a.softcap = c.softcap; a.window = c.window; a.causal = true;
    a.out = ref.data();
    attention_reference(a);
    a.out = out.data();
    avx2::attention(a);
    for (size_t i = 0; i < out.size(); ++i)
      if (!(std::fabs(out[i] - ref[i]) <= 2e-5 + 1e-4 * std::fabs(ref[i]))) {
        std::fprintf(stderr, "FAILED avx2 attention T=%lld S=%lld at %zu: %g vs %g\n", (long long)c.t, (long long)c.s, i, out[i], ref[i]);
        ++failures;
        break;
      }
  }
  std::printf("ok avx2 attention\n");
}

static void check_gated_act() {
  const int64_t n = 10007;
  std::vector<float> g(n), u(n), ref(n), out(n);
  Rng r(3);
  for (int64_t i = 0; i < n; ++i) { g[i] = -100.0f + 200.0f * i / (n - 1); u[i] = r.normal(); }
  for (Activation act : {Activation::kSiLU, Activation::kGeluExact, Activation::kGeluTanh}) {
    gated_act_reference(g.data(), u.data(), ref.data(), n, act);
    avx2::gated_act(g.data(), u.data(), out.data(), n, act);
    for (int64_t i = 0; i < n; ++i)
      if (!(std::fabs(out[i] - ref[i]) <= 1e-6 + 1e-5 * std::fabs(ref[i]))) {
        std::fprintf(stderr, "FAILED avx2 gated_act %d at x=%g: %g vs %g\n", static_cast<int>(act), g[i], out[i], ref[i]);
        ++failures;
        break;
      }
  }
  std::printf("ok avx2 gated_act\n");
}

static void check_rms_norm() {
  for (int64_t h : {1, 7, 8, 64, 100, 2048, 3000}) {
    Rng r(static_cast<uint64_t>(h));
    std::vector<float> x(h), w(h), ref(h), out(h);
    for (int64_t i = 0; i < h; ++i) { x[i] = r.normal() * (i % 31 == 0 ? 50.0f : 1.0f); w[i] = 1.0f + 0.1f * r.normal(); }
    rms_norm_row_reference(x.data(), w.data(), ref.data(), h, 1e-6f);
    avx2::rms_norm_row(x.data(), w.data(), out.data(), h, 1e-6f);
    for (int64_t i = 0; i < h; ++i)
      if (!(std::fabs(out[i] - ref[i]) <= 1e-6f * std::fabs(ref[i]))) {  // float64 sums: same inv, same products
        std::fprintf(stderr, "FAILED avx2 rms_norm h=%lld at %lld: %g vs %g\n", (long long)h, (long long)i, out[i], ref[i]);
        ++failures;
        break;
      }
    avx2::rms_norm_row(x.data(), w.data(), x.data(), h, 1e-6f);  // in place
    if (x != out) { std::fprintf(stderr, "FAILED avx2 rms_norm in place h=%lld\n", (long long)h); ++failures; }
  }
  std::printf("ok avx2 rms_norm\n");
}

// 4-bit decode kernel (qmatmul_q4_avx2.cc) against the int16 kernel it replaces (same integer
// sums, so only float32 summation order differs) and against an exact double-precision model of
// the integer path; the AVX2 activation quantizer against the scalar one (identical q16 and d).
static void check_q4_kernel() {
  struct Case { int64_t m, n, k; int gs; DType st; };
  const Case cases[] = {{1, 37, 512, 64, DType::BF16}, {1, 64, 640, 64, DType::F16}, {2, 9, 1024, 128, DType::F32},
                        {3, 13, 576, 64, DType::BF16}, {5, 6, 2048, 256, DType::BF16}, {13, 7, 64, 64, DType::F16},
                        {8, 33, 1536, 512, DType::BF16}, {1, 19, 1088, 64, DType::BF16}, {4, 11, 192, 64, DType::F16},
                        {2, 24, 1024, 64, DType::BF16}, {1, 48, 4096, 128, DType::F16}, {5, 16, 256, 64, DType::F32}};
  for (const Case& c : cases) {
    Rng r(static_cast<uint64_t>(c.m * 7 + c.n * 13 + c.k));
    const int64_t groups = c.n * c.k / c.gs;
    QuantWeight w;
    w.bits = 4;
    w.group_size = c.gs;
    w.rows = c.n;
    w.cols = c.k;
    w.packed = Tensor::empty({c.n, c.k / 8}, DType::U32);
    w.scales = Tensor::empty({c.n, c.k / c.gs}, c.st);
    w.biases = Tensor::empty({c.n, c.k / c.gs}, c.st);
    uint32_t* pk = w.packed.ptr<uint32_t>();
    for (int64_t i = 0; i < w.packed.numel(); ++i) pk[i] = static_cast<uint32_t>(r.uniform() * 4294967296.0);
    std::vector<double> sv(groups), bv(groups);
    for (int64_t i = 0; i < groups; ++i) {
      const float s = 0.01f * (0.5f + static_cast<float>(r.uniform())), b = -0.08f * static_cast<float>(r.uniform());
      if (c.st == DType::F32) { w.scales.ptr<float>()[i] = s; w.biases.ptr<float>()[i] = b; }
      else {
        const uint16_t hs = c.st == DType::BF16 ? f32_to_bf16(s) : f32_to_f16(s), hb = c.st == DType::BF16 ? f32_to_bf16(b) : f32_to_f16(b);
        w.scales.ptr<uint16_t>()[i] = hs;
        w.biases.ptr<uint16_t>()[i] = hb;
      }
      sv[i] = load_f32(w.scales.data(), c.st, i);
      bv[i] = load_f32(w.biases.data(), c.st, i);
    }
    std::vector<float> x(c.m * c.k), y_new(c.m * c.n, NAN), y_old(c.m * c.n, NAN), y_512(c.m * c.n, NAN);
    for (int64_t i = 0; i < c.m * c.k; ++i) x[i] = r.normal() * (i % 97 == 0 ? 20.0f : 1.0f);  // a few outliers
    const int64_t blocks = c.k / 64, g_per_row = c.k / c.gs;
    std::vector<int16_t> q16(c.m * c.k), q16v(c.m * c.k);
    std::vector<float> d(c.m * blocks), dv(c.m * blocks), gs(c.m * g_per_row), gsv(c.m * g_per_row);
    qmm::quantize_acts(x.data(), c.m, c.k, c.gs, 4, q16.data(), d.data(), gs.data());
    qmm::quantize_acts_avx2(x.data(), c.m, c.k, c.gs, 4, q16v.data(), dv.data(), gsv.data());
    if (q16 != q16v || d != dv) {
      std::fprintf(stderr, "FAILED avx2 quantize_acts differs from the scalar one (K=%lld)\n", (long long)c.k);
      ++failures;
      continue;
    }
    for (size_t i = 0; i < gs.size(); ++i) {
      double abs_sum = 0;  // float32 summation order: error bound relative to the sum of |x|
      for (int64_t k = 0; k < c.gs; ++k) abs_sum += std::fabs(x[i * c.gs + k]);
      if (!(std::fabs(gs[i] - gsv[i]) <= 1e-6 * (1.0 + abs_sum))) {
        std::fprintf(stderr, "FAILED avx2 gsum %zu: %g vs %g\n", i, gsv[i], gs[i]);
        ++failures;
        break;
      }
    }
    std::vector<int8_t> planes(static_cast<size_t>(qmm::q4_plane_bytes(c.m, c.k)), 99);
    qmm::split_planes_avx2(q16.data(), c.m, c.k, planes.data());
    qmm::Args a;
    a.x = x.data(); a.w = &w; a.M = c.m; a.N = c.n; a.K = c.k;
    qmm::Q4Acts qa;
    qa.planes = planes.data(); qa.d = d.data(); qa.gsum = gs.data();
    a.y = y_new.data();
    qmm::kernel_avx2_q4(a, qa, 0, c.n);
    const bool vnni = cpu_features().avx512f && cpu_features().avx512bw && cpu_features().avx512_vnni;
    if (vnni) {
      a.y = y_512.data();
      qmm::kernel_avx512_q4(a, qa, 0, c.n);
      // the same rows computed one activation row at a time: a row's result must not depend on M
      std::vector<float> y_row(c.n, NAN);
      for (int64_t m = 0; m < c.m; ++m) {
        qmm::Args one = a;
        one.M = 1;
        one.y = y_row.data();
        qmm::Q4Acts qr = qa;
        qr.planes = planes.data() + qmm::q4_plane_bytes(m, c.k);
        qr.d = d.data() + m * blocks;
        qr.gsum = gs.data() + m * g_per_row;
        qmm::kernel_avx512_q4(one, qr, 0, c.n);
        if (std::memcmp(y_row.data(), y_512.data() + m * c.n, sizeof(float) * c.n) != 0) {
          std::fprintf(stderr, "FAILED avx512 q4 kernel M=%lld K=%lld: row %lld differs when computed alone\n", (long long)c.m,
                       (long long)c.k, (long long)m);
          ++failures;
        }
      }
    }
    // The CPU's 8-row tile layout (qweight_layout.cc) where it fits: the same bytes elsewhere, so
    // both kernels' results and every dequantized row must be bit-identical to the row-major ones.
    const QuantWeight wt = backend(Device::kCPU).prepare_qweight(w);
    if (quant::tile_layout_fits(4, c.gs, c.n, c.k) != (wt.tile == quant::kTileRows)) {
      std::fprintf(stderr, "FAILED prepare_qweight N=%lld K=%lld gs=%d: tile %d\n", (long long)c.n, (long long)c.k, c.gs, wt.tile);
      ++failures;
    }
    if (wt.tile != 0) {
      qmm::Args at = a;
      at.w = &wt;
      std::vector<float> yt(c.m * c.n, NAN), dr(c.n * c.k), dt(c.n * c.k);
      at.y = yt.data();
      qmm::kernel_avx2_q4(at, qa, 0, c.n);
      bool same = std::memcmp(yt.data(), y_new.data(), sizeof(float) * yt.size()) == 0;
      if (vnni) {
        qmm::kernel_avx512_q4(at, qa, 0, c.n);
        same = same && std::memcmp(yt.data(), y_512.data(), sizeof(float) * yt.size()) == 0;
      }
      quant::dequantize_rows(w, 0, c.n, dr.data());
      quant::dequantize_rows(wt, 0, c.n, dt.data());
      quant::validate(wt, "tiled");
      if (!same || dr != dt) {
        std::fprintf(stderr, "FAILED tiled 4-bit weight N=%lld K=%lld: %s differ from the row-major ones\n", (long long)c.n,
                     (long long)c.k, same ? "dequantized rows" : "kernel results");
        ++failures;
      }
      const QuantWeight half = quant::row_view(wt, 8, c.n);
      std::vector<float> dh((c.n - 8) * c.k);
      quant::dequantize_rows(half, 0, c.n - 8, dh.data());
      if (!std::equal(dh.begin(), dh.end(), dr.begin() + 8 * c.k) || quant::row_view(wt, 4, c.n).packed.defined()) {
        std::fprintf(stderr, "FAILED row_view of a tiled weight N=%lld K=%lld\n", (long long)c.n, (long long)c.k);
        ++failures;
      }
    }
    qmm::IntActs ia;
    ia.q16 = q16.data(); ia.block = 64; ia.d = d.data(); ia.gsum = gs.data();
    a.y = y_old.data();
    qmm::kernel_avx2_int(a, ia, 0, c.n);
    // Exact model: nibble i of a row's byte stream is element i; q16 is in nibble order per block.
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(pk);
    double worst = 0, worst512 = 0;
    for (int64_t m = 0; m < c.m; ++m)
      for (int64_t n = 0; n < c.n; ++n) {
        double ref = 0, mag = 0;
        for (int64_t g = 0; g < g_per_row; ++g) {
          double inner = 0;
          for (int64_t b = g * c.gs / 64; b < (g + 1) * c.gs / 64; ++b) {
            int64_t isum = 0;
            for (int64_t j = 0; j < 64; ++j) {
              const int64_t e = b * 64 + j;
              const int q = (bytes[n * c.k / 2 + e / 2] >> (4 * (e & 1))) & 15;
              const int64_t at = (j & 1) ? 32 + j / 2 : j / 2;
              isum += q * q16[m * c.k + b * 64 + at];
              mag += std::fabs(q * sv[n * g_per_row + g] * x[m * c.k + e]);
            }
            inner += static_cast<double>(d[m * blocks + b]) * static_cast<double>(isum);
          }
          ref += sv[n * g_per_row + g] * inner + bv[n * g_per_row + g] * gs[m * g_per_row + g];
        }
        const double e1 = std::fabs(y_new[m * c.n + n] - ref) / (1e-6 + 2e-6 * mag);
        const double e2 = std::fabs(y_new[m * c.n + n] - y_old[m * c.n + n]) / (1e-6 + 2e-6 * mag);
        worst = std::max({worst, std::isnan(e1) ? INFINITY : e1, std::isnan(e2) ? INFINITY : e2});
        if (vnni) {
          const double e3 = std::fabs(y_512[m * c.n + n] - ref) / (1e-6 + 2e-6 * mag);
          worst512 = std::max(worst512, std::isnan(e3) ? INFINITY : e3);
        }
      }
    if (!(worst <= 1.0)) {
      std::fprintf(stderr, "FAILED avx2 q4 kernel M=%lld N=%lld K=%lld gs=%d %s: error %.3g x tolerance\n", (long long)c.m,
                   (long long)c.n, (long long)c.k, c.gs, dtype_name(c.st), worst);
      ++failures;
    }
    if (!(worst512 <= 1.0)) {
      std::fprintf(stderr, "FAILED avx512 q4 kernel M=%lld N=%lld K=%lld gs=%d %s: error %.3g x tolerance\n", (long long)c.m,
                   (long long)c.n, (long long)c.k, c.gs, dtype_name(c.st), worst512);
      ++failures;
    }
  }
  std::printf("ok avx2 q4 kernel%s\n", cpu_features().avx512_vnni ? ", avx512 q4 kernel" : "");
}

// --bench: GFLOP/s of prefill-shaped bf16 GEMMs (K = 2048 and the MLP down projection's 8192) and
// GB/s of a decode-shaped bf16 GEMV per family.
static void bench(const char* family, MatmulFn fn) {
  Rng r(1);
  const int64_t m = 512, n = 2048, k = 2048, gn = 8192;
  std::vector<float> x(m * gn), y(m * gn);
  for (float& v : x) v = r.normal();
  Weights w = make_weights(r, gn * k, DType::BF16);
  auto time_it = [&](int64_t mm, int64_t nn, int64_t kk) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      fn(x.data(), w.data(DType::BF16), DType::BF16, nullptr, y.data(), mm, nn, kk);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double g = time_it(m, n, k), g8 = time_it(m, n, gn), v = time_it(1, gn, k);
  std::printf("bench %-16s gemm bf16 %lldx%lldx%lld: %6.1f GFLOP/s, K=%lld: %6.1f GFLOP/s   gemv bf16 %lldx%lld: %6.1f GB/s\n",
              family, (long long)m, (long long)n, (long long)k, 2.0 * m * n * k / g / 1e9, (long long)gn,
              2.0 * m * n * gn / g8 / 1e9, (long long)gn, (long long)k, gn * k * 2.0 / v / 1e9);
}

int main(int argc, char** argv) {
  const CpuFeatures& f = cpu_features();
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) {
    if (f.avx2 && f.fma && f.f16c) bench("avx2", avx2::matmul);
    if (simd_level() == SimdLevel::kAvx512) {
      bench("avx512 exact", avx512_exact);
      if (f.avx512_bf16) bench("avx512 bf16-dot", avx512_bf16dot);
    }
    return 0;
  }
  check_matmul("reference", matmul_reference, 2e-6);
  check_matmul("emulated avx512 exact", emu16, 2e-6);
  check_invariance("emulated avx512 exact", emu16);
  check_matmul("emulated avx512 bf16-dot", emu_pair, 8e-3);
  check_invariance("emulated avx512 bf16-dot", emu_pair);
  if (f.avx2 && f.fma && f.f16c) {
    check_matmul("avx2", avx2::matmul, 2e-6);
    check_invariance("avx2", avx2::matmul);
    check_attention();
    check_gated_act();
    check_q4_kernel();
    check_rms_norm();
  } else {
    std::printf("skip avx2 (CPU lacks AVX2/FMA/F16C)\n");
  }
  if (simd_level() == SimdLevel::kAvx512) {
    check_matmul("avx512 exact", avx512_exact, 2e-6);
    check_invariance("avx512 exact", avx512_exact);
    if (f.avx512_bf16) {
      check_matmul("avx512 bf16-dot", avx512_bf16dot, 8e-3);
      check_invariance("avx512 bf16-dot", avx512_bf16dot);
      if (bf16_dot()) check_blocked_layout();
      else std::printf("skip four-row block weight layout (bf16-dot matmuls off here)\n");
    } else std::printf("skip avx512 bf16-dot (CPU lacks AVX512_BF16)\n");
  } else {
    std::printf("skip avx512 (CPU lacks AVX-512)\n");
  }
  if (failures) {
    std::fprintf(stderr, "%d cpu kernel checks failed\n", failures);
    return 1;
  }
  std::printf("all cpu kernel tests passed\n");
  return 0;
}
