// Backend consistency check: every op of ops.h on CUDA against a float64 reference computed here
// from the same (dtype-rounded) inputs, and against the CPU backend where it implements the op.
// Random inputs over awkward shapes. Prints one line per case and exits non-zero on any failure.
// Without a GPU it prints "skipped" and exits 0 (CI builds it; only the device runs it).
//   cuda_ops_check            all cases
//   cuda_ops_check --bench    also times GEMV / GEMM / attention at Llama-3 8B shapes
//   cuda_ops_check --sample   only the device sampling checks, then their timing
//   cuda_ops_check --paged    only the paged attention checks, then their timing (--paged-bench: timing only,
//                             --paged-check: checks only)
//   cuda_ops_check --rows     only the few-row GEMM (matmul_rows.cu, MLXB_ROWS_GEMM=1) checks, then its
//                             timings against cuBLASLt at the serving shapes
//   cuda_ops_check --stream-probe   streaming rates of register loads, cp.async rings and tensor
//                             copies (stream_probe.cu)
//   cuda_ops_check --lt-sweep [M [--all]]   cuBLASLt candidates timed at M rows (default 32), Llama-3 8B / 1B
//                                  shapes; --all: every configuration by algorithm id for the 8B products
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt_sweep.h"
#include "backend/cuda/matmul_rows.h"
#include "backend/cuda/stream_probe.h"
#include "ops/ops.h"

#include "check.h"
#include "sample_check.h"

using namespace mlxb;
using Vec = std::vector<double>;

namespace {

std::mt19937 rng(1234);
int failures = 0;

double round_to(double v, DType d) {
  float f = static_cast<float>(v);
  if (d == DType::BF16) return bf16_to_f32(f32_to_bf16(f));
  if (d == DType::F16) return f16_to_f32(f32_to_f16(f));
  return f;
}

// A host value array and its device tensor holding the same (rounded) numbers.
struct Pair {
  Vec host;
  Tensor dev;
};

Tensor host_tensor(const Vec& v, const Shape& shape, DType d) {
  Tensor t = Tensor::empty(shape, d, Device::kCPU);
  for (size_t i = 0; i < v.size(); ++i) {
    float f = static_cast<float>(v[i]);
    if (d == DType::F32) t.ptr<float>()[i] = f;
    else if (d == DType::BF16) t.ptr<uint16_t>()[i] = f32_to_bf16(f);
    else if (d == DType::F16) t.ptr<uint16_t>()[i] = f32_to_f16(f);
    else if (d == DType::I32) t.ptr<int32_t>()[i] = static_cast<int32_t>(v[i]);
  }
  return t;
}

Vec to_vec(const Tensor& t) {
  Tensor h = t.device() == Device::kCPU ? t : t.to(Device::kCPU);
  Vec v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (h.dtype()) {
      case DType::F32: v[i] = h.ptr<float>()[i]; break;
      case DType::BF16: v[i] = bf16_to_f32(h.ptr<uint16_t>()[i]); break;
      case DType::F16: v[i] = f16_to_f32(h.ptr<uint16_t>()[i]); break;
      case DType::I32: v[i] = h.ptr<int32_t>()[i]; break;
      default: break;
    }
  }
  return v;
}

Pair make(const Shape& shape, DType d, double lo = -1.0, double hi = 1.0) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = round_to(u(rng), d);
  return {v, host_tensor(v, shape, d).to(Device::kCUDA)};
}

Pair make_ints(const std::vector<int32_t>& ids) {
  Vec v(ids.begin(), ids.end());
  return {v, host_tensor(v, {static_cast<int64_t>(ids.size())}, DType::I32).to(Device::kCUDA)};
}

// Output tensor on the device poisoned with NaN so unwritten elements fail.
Tensor poisoned(const Shape& shape, DType d) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  Vec v(static_cast<size_t>(n), NAN);
  return host_tensor(v, shape, d).to(Device::kCUDA);
}

// Tolerance by the dtype the result is computed through: fp32 1e-7 (DESIGN.md); bf16 and f16
// results are rounded once on output (bf16 relative step 2^-8, so nMSE ~ 1e-6 from rounding alone).
double tol_for(DType d, double bf16 = 2e-5, double f16 = 2e-6) {
  return d == DType::F32 ? 1e-7 : d == DType::BF16 ? bf16 : f16;
}

void report(const std::string& name, double e, double tol) {
  bool ok = e <= tol;
  if (!ok) ++failures;
  std::printf("%-4s %-64s nmse %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name.c_str(), e, tol);
}

// Runs the CPU backend on host copies when it implements the op; returns false if not.
bool cpu_try(const std::function<void()>& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    return false;
  }
}

Tensor cpu_f32(const Vec& v, const Shape& s) { return host_tensor(v, s, DType::F32); }

const char* dn(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }

// ---------------------------------------------------------------- matmul
void check_matmul(int64_t m, int64_t n, int64_t k, DType xd, DType wd, bool bias) {
  Pair x = make({m, k}, xd), w = make({n, k}, wd), b = make({n}, wd);
  Tensor y = poisoned({m, n}, xd);
  ops::matmul(x.dev, w.dev, bias ? &b.dev : nullptr, y);
  Vec ref(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? b.host[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) s += x.host[i * k + kk] * w.host[j * k + kk];
      ref[i * n + j] = s;
    }
  Vec got = to_vec(y);
  char name[128];
  std::snprintf(name, sizeof name, "matmul M=%ld N=%ld K=%ld x=%s w=%s%s", (long)m, (long)n, (long)k, dn(xd), dn(wd), bias ? " +bias" : "");
  report(name, nmse(got, ref), tol_for(xd));
  if (xd == DType::F32) {
    Tensor cy = Tensor::empty({m, n}, DType::F32);
    Tensor cb = cpu_f32(b.host, {n});
    if (cpu_try([&] { ops::matmul(cpu_f32(x.host, {m, k}), cpu_f32(w.host, {n, k}), bias ? &cb : nullptr, cy); }))
      report(std::string(name) + " vs cpu", nmse(got, to_vec(cy)), 1e-7);
  }
}

// ---------------------------------------------------------------- norms, softmax, elementwise
void check_rms_norm(int64_t rows, int64_t h, DType d, bool add_one) {
  Pair x = make({rows, h}, d, -3, 3), w = make({h}, d);
  Tensor y = poisoned({rows, h}, d);
  ops::rms_norm(x.dev, w.dev, 1e-5f, add_one, y);
  Vec ref(x.host.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < h; ++i) ss += x.host[r * h + i] * x.host[r * h + i];
    double inv = 1.0 / std::sqrt(ss / h + 1e-5);
    for (int64_t i = 0; i < h; ++i) ref[r * h + i] = x.host[r * h + i] * inv * (add_one ? 1.0 + w.host[i] : w.host[i]);
  }
  report(std::string("rms_norm rows=") + std::to_string(rows) + " h=" + std::to_string(h) + " " + dn(d) + (add_one ? " (1+w)" : ""),
         nmse(to_vec(y), ref), tol_for(d));
  // In place (x aliases y).
  ops::rms_norm(x.dev, w.dev, 1e-5f, add_one, x.dev);
  report(std::string("rms_norm in place h=") + std::to_string(h) + " " + dn(d), nmse(to_vec(x.dev), ref), tol_for(d));
}

void check_layer_norm(int64_t rows, int64_t h, DType d, bool with_bias) {
  Pair x = make({rows, h}, d, -2, 4), w = make({h}, d), b = make({h}, d);
  Tensor y = poisoned({rows, h}, d);
  ops::layer_norm(x.dev, w.dev, with_bias ? &b.dev : nullptr, 1e-5f, y);
  Vec ref(x.host.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < h; ++i) mean += x.host[r * h + i];
    mean /= h;
    for (int64_t i = 0; i < h; ++i) var += (x.host[r * h + i] - mean) * (x.host[r * h + i] - mean);
    double inv = 1.0 / std::sqrt(var / h + 1e-5);
    for (int64_t i = 0; i < h; ++i)
      ref[r * h + i] = (x.host[r * h + i] - mean) * inv * w.host[i] + (with_bias ? b.host[i] : 0.0);
  }
  report(std::string("layer_norm rows=") + std::to_string(rows) + " h=" + std::to_string(h) + " " + dn(d) + (with_bias ? " +b" : ""),
         nmse(to_vec(y), ref), tol_for(d));
}

void check_softmax(int64_t rows, int64_t n, DType d) {
  Pair x = make({rows, n}, d, -8, 8);
  Tensor y = poisoned({rows, n}, d);
  ops::softmax(x.dev, y);
  Vec ref(x.host.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x.host[r * n + i]);
    for (int64_t i = 0; i < n; ++i) s += std::exp(x.host[r * n + i] - mx);
    for (int64_t i = 0; i < n; ++i) ref[r * n + i] = std::exp(x.host[r * n + i] - mx) / s;
  }
  report("softmax rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " " + dn(d), nmse(to_vec(y), ref), tol_for(d));
}

void check_rope(int64_t t, int64_t heads, int64_t dim, int64_t rot, bool interleaved, float mscale, DType d) {
  Pair x = make({t, heads, dim}, d);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(3 * i + 7 + (i % 5 == 0 ? 4000 : 0));
  Pair p = make_ints(pos);
  Vec inv(static_cast<size_t>(rot / 2));
  for (int64_t i = 0; i < rot / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rot));
  RopeArgs a;
  a.inv_freq = host_tensor(inv, {rot / 2}, DType::F32).to(Device::kCUDA);
  a.rot_dim = rot;
  a.interleaved = interleaved;
  a.mscale = mscale;
  ops::rope(x.dev, p.dev, a);
  Vec ref = x.host;
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < rot / 2; ++i) {
        double ang = static_cast<double>(static_cast<float>(pos[ti]) * static_cast<float>(inv[i]));  // f32 angle, as HF
        double c = std::cos(ang) * mscale, s = std::sin(ang) * mscale;
        int64_t base = (ti * heads + h) * dim;
        int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + rot / 2;
        double xa = x.host[base + ia], xb = x.host[base + ib];
        ref[base + ia] = xa * c - xb * s;
        ref[base + ib] = xb * c + xa * s;
      }
  char name[128];
  std::snprintf(name, sizeof name, "rope T=%ld H=%ld D=%ld rot=%ld%s mscale=%.2f %s", (long)t, (long)heads, (long)dim, (long)rot,
                interleaved ? " interleaved" : "", mscale, dn(d));
  report(name, nmse(to_vec(x.dev), ref), tol_for(d));
}

void check_gated(int64_t rows, int64_t f, Activation act, DType d) {
  Pair g = make({rows, f}, d, -5, 5), u = make({rows, f}, d, -2, 2);
  Tensor y = poisoned({rows, f}, d);
  ops::gated_act(g.dev, u.dev, act, y);
  Vec ref(g.host.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    double x = g.host[i], a;
    if (act == Activation::kSiLU) a = x / (1 + std::exp(-x));
    else if (act == Activation::kGeluExact) a = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    else a = 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    ref[i] = a * u.host[i];
  }
  const char* an = act == Activation::kSiLU ? "silu" : act == Activation::kGeluExact ? "gelu" : "gelu_tanh";
  report(std::string("gated_act ") + an + " " + std::to_string(rows) + "x" + std::to_string(f) + " " + dn(d), nmse(to_vec(y), ref),
         tol_for(d));
}

void check_elementwise(int64_t n, DType d) {
  Pair a = make({n}, d, -4, 4), b = make({n}, d);
  Tensor y = poisoned({n}, d);
  ops::add(a.dev, b.dev, y);
  Vec ref(a.host.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = a.host[i] + b.host[i];
  report("add n=" + std::to_string(n) + " " + dn(d), nmse(to_vec(y), ref), tol_for(d));
  ops::add(a.dev, b.dev, a.dev);
  report("add in place n=" + std::to_string(n) + " " + dn(d), nmse(to_vec(a.dev), ref), tol_for(d));
  for (auto& v : ref) v = 3.0 * std::tanh(v / 3.0);
  ops::softcap(a.dev, 3.0f);
  report("softcap n=" + std::to_string(n) + " " + dn(d), nmse(to_vec(a.dev), ref), tol_for(d));
}

void check_convert(int64_t n, DType from, DType to) {
  Pair a = make({n}, from, -100, 100);
  Tensor y = poisoned({n}, to);
  ops::convert(a.dev, y);
  Vec ref = a.host;
  for (auto& v : ref) v = round_to(v, to);
  Vec got = to_vec(y);
  bool exact = got == ref;  // round-to-nearest-even on both sides: must be bit-equal
  if (!exact) ++failures;
  std::printf("%-4s convert %s -> %s n=%ld (exact)\n", exact ? "ok" : "FAIL", dn(from), dn(to), (long)n);
}

void check_embedding(int64_t vocab, int64_t h, int64_t t, DType td, DType od) {
  Pair table = make({vocab, h}, td);
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  ids[0] = static_cast<int32_t>(vocab - 1);
  Pair idt = make_ints(ids);
  Tensor y = poisoned({t, h}, od);
  ops::embedding(table.dev, idt.dev, 1.5f, y);
  Vec ref(static_cast<size_t>(t * h));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j) ref[i * h + j] = table.host[ids[i] * h + j] * 1.5;
  report("embedding V=" + std::to_string(vocab) + " H=" + std::to_string(h) + " T=" + std::to_string(t) + " " + dn(td) + "->" + dn(od),
         nmse(to_vec(y), ref), tol_for(od));
}

void check_kv_write(int64_t t, int64_t heads, int64_t dim, int64_t slots, int64_t capacity, DType sd, DType cd) {
  Pair src = make({t, heads, dim}, sd);
  Pair cache = make({heads, capacity, dim}, cd);
  Tensor view = cache.dev.as_strided({heads, slots, dim}, {capacity * dim, dim, 1}, 0);
  std::vector<int32_t> sl(static_cast<size_t>(t));
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t i = 0; i < t; ++i) sl[i] = perm[i % slots];
  Pair slt = make_ints(sl);
  ops::kv_write(src.dev, slt.dev, view);
  Vec ref = cache.host;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < dim; ++j) ref[(h * capacity + sl[i]) * dim + j] = round_to(src.host[(i * heads + h) * dim + j], cd);
  report("kv_write T=" + std::to_string(t) + " H=" + std::to_string(heads) + " D=" + std::to_string(dim) + " S=" + std::to_string(slots) +
             "/" + std::to_string(capacity) + " " + dn(sd) + "->" + dn(cd),
         nmse(to_vec(cache.dev), ref), 0.0);
}

// ---------------------------------------------------------------- attention
struct AttnCase {
  const char* name;
  int64_t t, hq, hkv, s, d, capacity;
  bool causal;
  int64_t window;
  float softcap;
  bool shuffled;  // slot positions in rotating (non-monotonic) order with empty slots
  DType dt;
};

void check_attention(const AttnCase& c) {
  int64_t cap = std::max(c.capacity, c.s);
  Pair q = make({c.t, c.hq, c.d}, c.dt, -2, 2);
  Pair kb = make({c.hkv, cap, c.d}, c.dt, -2, 2), vb = make({c.hkv, cap, c.d}, c.dt);
  Tensor k = kb.dev.as_strided({c.hkv, c.s, c.d}, {cap * c.d, c.d, 1}, 0);
  Tensor v = vb.dev.as_strided({c.hkv, c.s, c.d}, {cap * c.d, c.d, 1}, 0);
  // Queries are the last t positions of a sequence of s tokens.
  std::vector<int32_t> kpos(static_cast<size_t>(c.s)), qpos(static_cast<size_t>(c.t));
  for (int64_t j = 0; j < c.s; ++j) kpos[j] = static_cast<int32_t>(j);
  if (c.shuffled) {
    std::rotate(kpos.begin(), kpos.begin() + c.s / 3, kpos.end());
    for (int64_t j = 0; j < c.s; j += 7) kpos[j] = -1;
  }
  for (int64_t i = 0; i < c.t; ++i) qpos[i] = static_cast<int32_t>(c.s - c.t + i);
  Pair qp = make_ints(qpos), kp = make_ints(kpos);
  AttentionArgs a;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  a.softcap = c.softcap;
  a.window = c.window;
  a.causal = c.causal;
  Tensor out = poisoned({c.t, c.hq, c.d}, c.dt);
  ops::attention(q.dev, k, v, qp.dev, kp.dev, a, out);
  Vec ref(q.host.size(), 0.0);
  int64_t group = c.hq / c.hkv;
  std::vector<double> sc(static_cast<size_t>(c.s));
  for (int64_t ti = 0; ti < c.t; ++ti)
    for (int64_t h = 0; h < c.hq; ++h) {
      int64_t g = h / group;
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.s; ++j) {
        int kpj = kpos[j];
        bool vis = kpj >= 0 && (!c.causal || kpj <= qpos[ti]) && (c.window <= 0 || qpos[ti] - kpj < c.window);
        if (!vis) { sc[j] = -INFINITY; continue; }
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e) dot += q.host[(ti * c.hq + h) * c.d + e] * kb.host[(g * cap + j) * c.d + e];
        double s = dot * a.scale;
        if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
        sc[j] = s;
        mx = std::max(mx, s);
      }
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < c.s; ++j) sum += sc[j] == -INFINITY ? 0.0 : std::exp(sc[j] - mx);
      for (int64_t j = 0; j < c.s; ++j) {
        if (sc[j] == -INFINITY) continue;
        double p = std::exp(sc[j] - mx) / sum;
        for (int64_t e = 0; e < c.d; ++e) ref[(ti * c.hq + h) * c.d + e] += p * vb.host[(g * cap + j) * c.d + e];
      }
    }
  char name[160];
  std::snprintf(name, sizeof name, "attention %s T=%ld Hq=%ld Hkv=%ld S=%ld D=%ld %s", c.name, (long)c.t, (long)c.hq, (long)c.hkv, (long)c.s,
                (long)c.d, dn(c.dt));
  // bf16: probabilities are rounded to bf16 before P·V on tensor cores, ~2e-4 relative.
  report(name, nmse(to_vec(out), ref), tol_for(c.dt, 1e-4, 1e-5));
}

// q as the row-strided q columns of a fused [q | k | v] projection must give exactly what the
// contiguous q gives (the mma kernel reads it in place; short inputs go through a copy).
void check_attention_strided_q(int64_t t, int64_t hq, int64_t hkv, int64_t d, DType dt) {
  const int64_t width = (hq + 2 * hkv) * d;
  Pair qkv = make({t, width}, dt, -2, 2), k = make({hkv, t, d}, dt, -2, 2), v = make({hkv, t, d}, dt);
  Tensor qs = qkv.dev.as_strided({t, hq, d}, {width, d, 1}, 0);
  Tensor qc = Tensor::empty({t, hq, d}, dt, Device::kCUDA);
  for (int64_t i = 0; i < t; ++i) qc.slice_rows(i, i + 1).copy_from(qkv.dev.slice_rows(i, i + 1).reshape({width}).slice_rows(0, hq * d).reshape({1, hq, d}));
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(i);
  Pair p = make_ints(pos);
  AttentionArgs a;
  a.scale = 0.1f;
  Tensor o1 = poisoned({t, hq, d}, dt), o2 = poisoned({t, hq, d}, dt);
  ops::attention(qc, k.dev, v.dev, p.dev, p.dev, a, o1);
  ops::attention(qs, k.dev, v.dev, p.dev, p.dev, a, o2);
  report("attention strided q T=" + std::to_string(t) + " Hq=" + std::to_string(hq) + " Hkv=" + std::to_string(hkv) + " D=" +
             std::to_string(d) + " " + dn(dt) + " (== contiguous q)",
         nmse(to_vec(o2), to_vec(o1)), 0.0);
}

// The kv_len hint of a captured decode step: S is the capacity, later slots are empty (their
// positions lie in the future); with the hint they are skipped, and the result must not change.
void check_kv_len_hint(int64_t len, int64_t cap, int64_t d, DType dt) {
  Pair q = make({1, 32, d}, dt, -2, 2), k = make({8, cap, d}, dt, -2, 2), v = make({8, cap, d}, dt);
  std::vector<int32_t> kp(static_cast<size_t>(cap));
  for (int64_t i = 0; i < cap; ++i) kp[i] = static_cast<int32_t>(i);
  Pair kpt = make_ints(kp), qpt = make_ints({static_cast<int32_t>(len - 1)}), lt = make_ints({static_cast<int32_t>(len)});
  AttentionArgs a;
  a.scale = 0.09f;
  Tensor plain = poisoned({1, 32, d}, dt), hinted = poisoned({1, 32, d}, dt);
  ops::attention(q.dev, k.dev, v.dev, qpt.dev, kpt.dev, a, plain);
  a.kv_len = lt.dev;
  ops::attention(q.dev, k.dev, v.dev, qpt.dev, kpt.dev, a, hinted);
  report("attention kv_len hint len=" + std::to_string(len) + " cap=" + std::to_string(cap) + " " + dn(dt) + " (== no hint)",
         nmse(to_vec(hinted), to_vec(plain)), 0.0);
}

// add_rms_norm must equal add followed by rms_norm exactly (decode graphs rely on it).
void check_add_rms_norm(int64_t rows, int64_t h, DType d, bool add_one) {
  Pair x = make({rows, h}, d, -3, 3), b = make({rows, h}, d, -1, 1), w = make({h}, d);
  Tensor x1 = Tensor::empty({rows, h}, d, Device::kCUDA), x2 = Tensor::empty({rows, h}, d, Device::kCUDA);
  x1.copy_from(x.dev);
  x2.copy_from(x.dev);
  Tensor y1 = poisoned({rows, h}, d), y2 = poisoned({rows, h}, d);
  ops::add(x1, b.dev, x1);
  ops::rms_norm(x1, w.dev, 1e-6f, add_one, y1);
  ops::add_rms_norm(x2, b.dev, w.dev, 1e-6f, add_one, y2);
  std::string name = "add_rms_norm rows=" + std::to_string(rows) + " h=" + std::to_string(h) + " " + dn(d);
  report(name + " y == add; rms_norm", nmse(to_vec(y2), to_vec(y1)), 0.0);
  report(name + " x == add", nmse(to_vec(x2), to_vec(x1)), 0.0);
}

// gated_matmul on a fused [gate; up] weight must equal matmul on each half then gated_act.
void check_gated_matmul(int64_t m, int64_t f, int64_t k, DType d, bool bias, Activation act) {
  Pair x = make({m, k}, d), w = make({2 * f, k}, d, -0.2, 0.2), b = make({2 * f}, d);
  Tensor gate = Tensor::empty({m, f}, d, Device::kCUDA), up = Tensor::empty({m, f}, d, Device::kCUDA);
  Tensor bg = b.dev.slice_rows(0, f), bu = b.dev.slice_rows(f, 2 * f);
  ops::matmul(x.dev, w.dev.slice_rows(0, f), bias ? &bg : nullptr, gate);
  ops::matmul(x.dev, w.dev.slice_rows(f, 2 * f), bias ? &bu : nullptr, up);
  Tensor ref = poisoned({m, f}, d), got = poisoned({m, f}, d);
  ops::gated_act(gate, up, act, ref);
  ops::gated_matmul(x.dev, w.dev, bias ? &b.dev : nullptr, act, got);
  report("gated_matmul M=" + std::to_string(m) + " F=" + std::to_string(f) + " K=" + std::to_string(k) + " " + dn(d) +
             (bias ? " +bias" : "") + " == matmul; gated_act",
         nmse(to_vec(got), to_vec(ref)), 0.0);
}

// rope_kv_write must equal rope(q), rope(k), kv_write(k), kv_write(v) exactly.
// Rope arguments on the device: rot / 2 frequencies base^(-2i / rot).
RopeArgs device_rope(int64_t rot, double base, bool interleaved, float mscale) {
  std::vector<double> f;
  for (int64_t i = 0; i < rot / 2; ++i) f.push_back(std::pow(base, -2.0 * i / rot));
  RopeArgs a;
  a.inv_freq = host_tensor(f, {rot / 2}, DType::F32).to(Device::kCUDA);
  a.rot_dim = rot;
  a.interleaved = interleaved;
  a.mscale = mscale;
  return a;
}

void check_rope_kv_write(int64_t t, int64_t hq, int64_t hkv, int64_t dim, int64_t rot, bool interleaved, DType d, DType cd) {
  const int64_t cap = 50;
  Pair q = make({t, hq, dim}, d), k = make({t, hkv, dim}, d), v = make({t, hkv, dim}, d);
  Pair kc = make({hkv, cap, dim}, cd), vc = make({hkv, cap, dim}, cd);
  std::vector<int32_t> pos, sl;
  for (int64_t i = 0; i < t; ++i) { pos.push_back(static_cast<int32_t>(100 + 7 * i)); sl.push_back(static_cast<int32_t>((3 + 11 * i) % cap)); }
  if (t > 2) sl[1] = -1;  // skipped slot
  Pair pt = make_ints(pos), st = make_ints(sl);
  const RopeArgs a = device_rope(rot, 10000.0, interleaved, 1.1f);
  auto copy = [](const Tensor& x) { Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::kCUDA); y.copy_from(x); return y; };
  Tensor q1 = copy(q.dev), k1 = copy(k.dev), kc1 = copy(kc.dev), vc1 = copy(vc.dev);
  ops::rope(q1, pt.dev, a);
  ops::rope(k1, pt.dev, a);
  ops::kv_write(k1, st.dev, kc1);
  ops::kv_write(v.dev, st.dev, vc1);
  Tensor q2 = copy(q.dev), k2 = copy(k.dev), kc2 = copy(kc.dev), vc2 = copy(vc.dev);
  ops::rope_kv_write(q2, k2, v.dev, pt.dev, a, st.dev, kc2, vc2);
  std::string name = "rope_kv_write T=" + std::to_string(t) + " Hq=" + std::to_string(hq) + " Hkv=" + std::to_string(hkv) + " D=" +
                     std::to_string(dim) + " rot=" + std::to_string(rot) + (interleaved ? " interleaved " : " ") + dn(d) + "->" + dn(cd);
  double e = std::max({nmse(to_vec(q2), to_vec(q1)), nmse(to_vec(k2), to_vec(k1)), nmse(to_vec(kc2), to_vec(kc1)),
                       nmse(to_vec(vc2), to_vec(vc1))});
  report(name + " == rope; kv_write", e, 0.0);
}

// rope_kv_write on row-strided views (q, k, v as column ranges of one fused [T, (Hq + 2 Hkv) D]
// projection, the engine's batched step) must equal it on contiguous copies exactly.
void check_rope_kv_write_strided(int64_t t, int64_t hq, int64_t hkv, int64_t dim, DType d) {
  const int64_t cap = 64, width = (hq + 2 * hkv) * dim;
  Pair qkv = make({t, width}, d), kc = make({hkv, cap, dim}, d), vc = make({hkv, cap, dim}, d);
  std::vector<int32_t> pos, sl;
  for (int64_t i = 0; i < t; ++i) { pos.push_back(static_cast<int32_t>(9 + 5 * i)); sl.push_back(static_cast<int32_t>((7 + 13 * i) % cap)); }
  if (t > 1) sl[0] = -1;  // a padding row: no write
  Pair pt = make_ints(pos), st = make_ints(sl);
  const RopeArgs a = device_rope(dim, 500000.0, false, 1.0f);
  auto copy = [](const Tensor& x) { Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::kCUDA); y.copy_from(x); return y; };
  auto cols = [&](Tensor& buf, int64_t heads, int64_t at) { return buf.as_strided({t, heads, dim}, {width, dim, 1}, at); };
  // Contiguous reference: the column ranges copied out through the host.
  Vec h = qkv.host, qh, kh, vh;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const double x = h[static_cast<size_t>(r * width + c)];
      (c < hq * dim ? qh : c < (hq + hkv) * dim ? kh : vh).push_back(x);
    }
  Tensor q1 = host_tensor(qh, {t, hq, dim}, d).to(Device::kCUDA), k1 = host_tensor(kh, {t, hkv, dim}, d).to(Device::kCUDA);
  Tensor v1 = host_tensor(vh, {t, hkv, dim}, d).to(Device::kCUDA), kc1 = copy(kc.dev), vc1 = copy(vc.dev);
  ops::rope_kv_write(q1, k1, v1, pt.dev, a, st.dev, kc1, vc1);
  Tensor buf = copy(qkv.dev), kc2 = copy(kc.dev), vc2 = copy(vc.dev);
  Tensor q2 = cols(buf, hq, 0), k2 = cols(buf, hkv, hq * dim), v2 = cols(buf, hkv, (hq + hkv) * dim);
  ops::rope_kv_write(q2, k2, v2, pt.dev, a, st.dev, kc2, vc2);
  Vec got = to_vec(buf), gq, gk;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < (hq + hkv) * dim; ++c) (c < hq * dim ? gq : gk).push_back(got[static_cast<size_t>(r * width + c)]);
  const std::string name = "rope_kv_write strided T=" + std::to_string(t) + " Hq=" + std::to_string(hq) + " Hkv=" +
                           std::to_string(hkv) + " D=" + std::to_string(dim) + " " + dn(d);
  report(name + " == contiguous", std::max({nmse(gq, to_vec(q1)), nmse(gk, to_vec(k1)), nmse(to_vec(kc2), to_vec(kc1)),
                                            nmse(to_vec(vc2), to_vec(vc1))}),
         0.0);
}

// rope_paged_attention (one query per row, q/k/v column views of one fused projection, bf16) ==
// rope_kv_write then paged_attention, bit for bit: the attention output and both pools. Rows of
// lengths 1 .. len_span (several splits for long ones), a padding row (slot -1: no write),
// shuffled blocks; half-split or interleaved pairs, optional window.
void check_rope_paged(int64_t rows, int64_t hq, int64_t hkv, int64_t dim, bool interleaved, int64_t window, int64_t len_span) {
  const DType B = DType::BF16;
  const int64_t bs = 16, max_blocks = (len_span + bs - 1) / bs + 1, blocks = rows * max_blocks, slots_n = blocks * bs;
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> qo, qc, kl, table, pos, sl;
  for (int64_t r = 0; r < rows; ++r) {
    const bool pad = r == rows - 1;
    const int64_t len = pad ? 1 : 1 + (r * 389 + 7) % len_span;
    qo.push_back(static_cast<int32_t>(r));
    qc.push_back(1);
    kl.push_back(static_cast<int32_t>(len));
    for (int64_t b = 0; b < max_blocks; ++b) table.push_back(perm[static_cast<size_t>(r * max_blocks + b)]);
    pos.push_back(static_cast<int32_t>(len - 1));
    const int64_t p = len - 1;
    sl.push_back(pad ? -1 : static_cast<int32_t>(table[static_cast<size_t>(r * max_blocks + p / bs)] * bs + p % bs));
  }
  const int64_t width = (hq + 2 * hkv) * dim;
  Pair qkv = make({rows, width}, B), kp = make({hkv, slots_n, dim}, B), vp = make({hkv, slots_n, dim}, B);
  Pair pt = make_ints(pos), st = make_ints(sl);
  const RopeArgs ra = device_rope(dim, 500000.0, interleaved, interleaved ? 1.0f : 1.25f);
  AttentionArgs args;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  args.window = window;
  PagedAttentionRows pr;
  pr.q_offset = make_ints(qo).dev;
  pr.q_count = make_ints(qc).dev;
  pr.kv_len = make_ints(kl).dev;
  pr.block_table = make_ints(table).dev.reshape({rows, max_blocks});
  pr.block_size = bs;
  pr.max_q_count = 1;
  pr.max_kv_len = *std::max_element(kl.begin(), kl.end());
  auto copy = [](const Tensor& x) { Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::kCUDA); y.copy_from(x); return y; };
  auto run = [&](bool fused, Tensor& kc, Tensor& vc, Tensor& out) {  // returns the projection buffer after the op
    Tensor buf = copy(qkv.dev);
    Tensor q = buf.as_strided({rows, hq, dim}, {width, dim, 1}, 0);
    Tensor k = buf.as_strided({rows, hkv, dim}, {width, dim, 1}, hq * dim);
    Tensor v = buf.as_strided({rows, hkv, dim}, {width, dim, 1}, (hq + hkv) * dim);
    if (fused) {
      const char* was = std::getenv("MLXB_PAGED_ROPE");
      const std::string keep = was ? was : "";
      setenv("MLXB_PAGED_ROPE", "1", 1);  // the folded form (read at each call)
      ops::rope_paged_attention(q, k, v, pt.dev, ra, st.dev, kc, vc, pr, args, out);
      if (was) setenv("MLXB_PAGED_ROPE", keep.c_str(), 1);
      else unsetenv("MLXB_PAGED_ROPE");
    } else {
      ops::rope_kv_write(q, k, v, pt.dev, ra, st.dev, kc, vc);
      ops::paged_attention(q, kc, vc, pr, args, out);
    }
    return buf;
  };
  Tensor kc1 = copy(kp.dev), vc1 = copy(vp.dev), kc2 = copy(kp.dev), vc2 = copy(vp.dev);
  Tensor out1 = poisoned({rows, hq, dim}, B), out2 = poisoned({rows, hq, dim}, B);
  run(false, kc1, vc1, out1);
  const Tensor after = run(true, kc2, vc2, out2);
  const std::string name = "rope_paged_attention rows=" + std::to_string(rows) + " Hq=" + std::to_string(hq) + " Hkv=" +
                           std::to_string(hkv) + " D=" + std::to_string(dim) + (interleaved ? " interleaved" : "") +
                           (window ? " window=" + std::to_string(window) : "") + " keys<=" + std::to_string(len_span);
  Vec o1 = to_vec(out1), o2 = to_vec(out2);
  o1.resize(static_cast<size_t>((rows - 1) * hq * dim));  // the padding row's output is not defined
  o2.resize(o1.size());
  report(name + " == rope_kv_write + paged_attention (out)", nmse(o2, o1), 0.0);
  report(name + " == rope_kv_write + paged_attention (pools)", std::max(nmse(to_vec(kc2), to_vec(kc1)), nmse(to_vec(vc2), to_vec(vc1))), 0.0);
  // The folded kernel ran (rope_kv_write would have rotated q and k in the projection buffer).
  report(name + " folded (q, k left un-rotated)", nmse(to_vec(after), qkv.host), 0.0);
}

// paged_attention: decode rows and short query chunks over random block tables, against the CPU
// backend on float32 copies; q given contiguous and as a row-strided view must agree exactly.
// bf16: the split decode kernel (default) against the single-block one (MLXB_PAGED_SPLIT=0), and
// rows launched alone (other grid sizes) must equal the same rows in the batch bit for bit.
// len_span: row lengths 2 .. len_span + 4 (a 16-slot block table wide enough).
void check_paged_attention(int64_t rows, int64_t hq, int64_t hkv, int64_t dim, DType d, int64_t window = 0, float softcap = 0.0f,
                           int64_t len_span = 300) {
  const int64_t bs = 16, blocks = 96, slots_n = blocks * bs;
  std::vector<int32_t> qo, qc, kl, table;
  const int64_t max_blocks = std::max<int64_t>(40, (len_span + 4 + bs - 1) / bs + 1);
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  int64_t tq = 0, next_block = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t cnt = r % 5 == 3 ? 3 : 1, len = 1 + (r * 97 + 13) % len_span + cnt;
    const int64_t need = (len + bs - 1) / bs;
    qo.push_back(static_cast<int32_t>(tq));
    qc.push_back(static_cast<int32_t>(cnt));
    kl.push_back(static_cast<int32_t>(len));
    for (int64_t b = 0; b < max_blocks; ++b)
      table.push_back(b < need ? perm[static_cast<size_t>((next_block + b) % blocks)] : 0);
    next_block += need;
    tq += cnt;
  }
  const int64_t width = (hq + 2 * hkv) * dim;
  Pair qkv = make({tq, width}, d), kp = make({hkv, slots_n, dim}, d), vp = make({hkv, slots_n, dim}, d);
  Vec qh;
  for (int64_t r = 0; r < tq; ++r)
    for (int64_t c = 0; c < hq * dim; ++c) qh.push_back(qkv.host[static_cast<size_t>(r * width + c)]);
  AttentionArgs args;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  args.window = window;
  args.softcap = softcap;
  auto ints = [](const std::vector<int32_t>& v, const Shape& shape, Device dev) {
    Tensor t = Tensor::empty(shape, DType::I32, Device::kCPU);
    std::copy(v.begin(), v.end(), t.ptr<int32_t>());
    return dev == Device::kCPU ? t : t.to(dev);
  };
  auto rows_on = [&](Device dev) {
    PagedAttentionRows pr;
    pr.q_offset = ints(qo, {rows}, dev);
    pr.q_count = ints(qc, {rows}, dev);
    pr.kv_len = ints(kl, {rows}, dev);
    pr.block_table = ints(table, {rows, max_blocks}, dev);
    pr.block_size = bs;
    pr.max_q_count = 3;
    pr.max_kv_len = *std::max_element(kl.begin(), kl.end());
    return pr;
  };
  Tensor q_dev = host_tensor(qh, {tq, hq, dim}, d).to(Device::kCUDA);
  Tensor out1 = poisoned({tq, hq, dim}, d), out2 = poisoned({tq, hq, dim}, d);
  const PagedAttentionRows gpu = rows_on(Device::kCUDA);
  ops::paged_attention(q_dev, kp.dev, vp.dev, gpu, args, out1);
  Tensor q_view = qkv.dev.as_strided({tq, hq, dim}, {width, dim, 1}, 0);
  ops::paged_attention(q_view, kp.dev, vp.dev, gpu, args, out2);
  Tensor ref = Tensor::empty({tq, hq, dim}, DType::F32, Device::kCPU);
  Tensor qc_cpu = host_tensor(qh, {tq, hq, dim}, DType::F32), kc_cpu = host_tensor(kp.host, {hkv, slots_n, dim}, DType::F32);
  Tensor vc_cpu = host_tensor(vp.host, {hkv, slots_n, dim}, DType::F32);
  ops::paged_attention(qc_cpu, kc_cpu, vc_cpu, rows_on(Device::kCPU), args, ref);
  const std::string name = "paged_attention rows=" + std::to_string(rows) + " Hq=" + std::to_string(hq) + " Hkv=" +
                           std::to_string(hkv) + " D=" + std::to_string(dim) + " " + dn(d) +
                           (window ? " window=" + std::to_string(window) : "") + (softcap > 0 ? " softcap" : "");
  report(name + " vs cpu", nmse(to_vec(out1), to_vec(ref)), d == DType::F32 ? 1e-10 : 1e-4);
  report(name + " strided q == contiguous", nmse(to_vec(out2), to_vec(out1)), 0.0);
  if (d != DType::BF16) return;
  const char* prev = std::getenv("MLXB_PAGED_SPLIT");
  const std::string keep = prev ? prev : "";
  setenv("MLXB_PAGED_SPLIT", "0", 1);
  Tensor out3 = poisoned({tq, hq, dim}, d);
  ops::paged_attention(q_dev, kp.dev, vp.dev, gpu, args, out3);
  if (prev) setenv("MLXB_PAGED_SPLIT", keep.c_str(), 1);
  else unsetenv("MLXB_PAGED_SPLIT");
  const Vec v1 = to_vec(out1), v3 = to_vec(out3);
  report(name + " single-block kernel vs cpu", nmse(v3, to_vec(ref)), 1e-4);
  report(name + " default vs single-block kernel", nmse(v1, v3), 1e-4);
  // Rows alone: a launch of one row (its own grid), and of the rows in reverse order.
  double worst = 0.0;
  for (int64_t r : {int64_t{0}, rows / 2, rows - 1}) {
    auto one = [&](const std::vector<int32_t>& v) { return std::vector<int32_t>{v[static_cast<size_t>(r)]}; };
    PagedAttentionRows pr;
    pr.q_offset = ints(one(qo), {1}, Device::kCUDA);
    pr.q_count = ints(one(qc), {1}, Device::kCUDA);
    pr.kv_len = ints(one(kl), {1}, Device::kCUDA);
    const int64_t need = (kl[static_cast<size_t>(r)] + bs - 1) / bs;
    std::vector<int32_t> trow(table.begin() + r * max_blocks, table.begin() + r * max_blocks + need);
    pr.block_table = ints(trow, {1, need}, Device::kCUDA);
    pr.block_size = bs;
    pr.max_q_count = qc[static_cast<size_t>(r)];
    pr.max_kv_len = kl[static_cast<size_t>(r)];
    Tensor o1 = poisoned({tq, hq, dim}, d);
    ops::paged_attention(q_dev, kp.dev, vp.dev, pr, args, o1);
    const Vec va = to_vec(o1);
    const size_t a0 = static_cast<size_t>(qo[static_cast<size_t>(r)] * hq * dim), a1 = a0 + static_cast<size_t>(qc[static_cast<size_t>(r)] * hq * dim);
    worst = std::max(worst, nmse(Vec(va.begin() + a0, va.begin() + a1), Vec(v1.begin() + a0, v1.begin() + a1)));
  }
  {
    std::vector<int32_t> ro(qo.rbegin(), qo.rend()), rc(qc.rbegin(), qc.rend()), rl(kl.rbegin(), kl.rend()), rt;
    for (int64_t r = rows - 1; r >= 0; --r) rt.insert(rt.end(), table.begin() + r * max_blocks, table.begin() + (r + 1) * max_blocks);
    PagedAttentionRows pr = gpu;
    pr.q_offset = ints(ro, {rows}, Device::kCUDA);
    pr.q_count = ints(rc, {rows}, Device::kCUDA);
    pr.kv_len = ints(rl, {rows}, Device::kCUDA);
    pr.block_table = ints(rt, {rows, max_blocks}, Device::kCUDA);
    Tensor o2 = poisoned({tq, hq, dim}, d);
    ops::paged_attention(q_dev, kp.dev, vp.dev, pr, args, o2);
    worst = std::max(worst, nmse(to_vec(o2), v1));
  }
  report(name + " rows alone / reordered == batch", worst, 0.0);
}

// Timing of the engine's decode step shape: `rows` rows of one query, keys 512 .. 640 per row,
// distinct blocks, 4 pool copies rotated (past L2): the first split kernel (MLXB_PAGED_SPLIT_KERNEL=1,
// unit splits of 512), the second with unit splits of 512 and with balanced splits of units 256 ..
// 640 (MLXB_PAGED_SPLIT_BALANCED, MLXB_PAGED_SPLIT_KEYS), and the single-block kernel
// (MLXB_PAGED_SPLIT=0).
void bench_paged(int64_t rows, int64_t dim) {
  const int64_t hq = 32, hkv = 8, bs = 16, max_blocks = 41;
  std::vector<int32_t> qo, qc, kl, table;
  int64_t keys = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t len = 512 + (r * 37) % 129;
    keys += len;
    qo.push_back(static_cast<int32_t>(r));
    qc.push_back(1);
    kl.push_back(static_cast<int32_t>(len));
    for (int64_t b = 0; b < max_blocks; ++b) table.push_back(static_cast<int32_t>(r * max_blocks + b));
  }
  const int64_t slots_n = rows * max_blocks * bs;
  std::vector<Tensor> ks, vs;
  const Tensor ksrc = make({hkv, slots_n, dim}, DType::F32).dev, vsrc = make({hkv, slots_n, dim}, DType::F32).dev;
  for (int i = 0; i < 4; ++i) {
    ks.push_back(Tensor::empty({hkv, slots_n, dim}, DType::BF16, Device::kCUDA));
    vs.push_back(Tensor::empty({hkv, slots_n, dim}, DType::BF16, Device::kCUDA));
    ops::convert(ksrc, ks.back());
    ops::convert(vsrc, vs.back());
  }
  auto dev_ints = [](const std::vector<int32_t>& v, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::I32, Device::kCPU);
    std::copy(v.begin(), v.end(), t.ptr<int32_t>());
    return t.to(Device::kCUDA);
  };
  PagedAttentionRows pr;
  pr.q_offset = dev_ints(qo, {rows});
  pr.q_count = dev_ints(qc, {rows});
  pr.kv_len = dev_ints(kl, {rows});
  pr.block_table = dev_ints(table, {rows, max_blocks});
  pr.block_size = bs;
  pr.max_q_count = 1;
  pr.max_kv_len = *std::max_element(kl.begin(), kl.end());
  Tensor q = make({rows, hq, dim}, DType::BF16).dev, out = Tensor::empty({rows, hq, dim}, DType::BF16, Device::kCUDA);
  AttentionArgs a;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  const double bytes = 2.0 * keys * hkv * dim * 2;
  const char* names[] = {"MLXB_PAGED_SPLIT", "MLXB_PAGED_SPLIT_KERNEL", "MLXB_PAGED_SPLIT_KEYS", "MLXB_PAGED_SPLIT_BALANCED", "MLXB_PAGED_REGK"};
  std::string keep[5];
  bool had[5];
  for (int n = 0; n < 5; ++n) {
    const char* e = std::getenv(names[n]);
    had[n] = e != nullptr;
    keep[n] = e ? e : "";
  }
  struct Mode {
    const char *split, *kernel, *keys, *balanced, *label, *regk = "0";
  };
  const Mode modes[] = {{"1", "1", "512", "0", "split 1st  keys=512"},     {"1", "2", "512", "0", "split 2nd  keys=512"},
                        {"1", "2", "256", "1", "split 2nd balanced 256"}, {"1", "2", "384", "1", "split 2nd balanced 384"},
                        {"1", "2", "512", "1", "split 2nd balanced 512"}, {"1", "2", "640", "1", "split 2nd balanced 640"},
                        {"1", "2", "640", "1", "640, keys in regs (2/SM)", "2"}, {"1", "2", "384", "1", "384, keys in regs (2/SM)", "2"},
                        {"0", "2", "512", "1", "single-block"}};
  for (const Mode& md : modes) {
    setenv("MLXB_PAGED_SPLIT", md.split, 1);
    setenv("MLXB_PAGED_SPLIT_KERNEL", md.kernel, 1);
    setenv("MLXB_PAGED_SPLIT_KEYS", md.keys, 1);
    setenv("MLXB_PAGED_SPLIT_BALANCED", md.balanced, 1);
    setenv("MLXB_PAGED_REGK", md.regk, 1);
    int i = 0;
    const double ms = time_ms([&] { ops::paged_attention(q, ks[i % 4], vs[i % 4], pr, a, out); ++i; }, 200);
    std::printf("paged decode attention rows=%ld Hq=32 Hkv=8 D=%ld keys 512..640 %-24s %8.1f us  %7.0f GB/s\n", (long)rows,
                (long)dim, md.label, ms * 1e3, bytes / (ms * 1e-3) / 1e9);
  }
  for (int n = 0; n < 5; ++n) {
    if (had[n]) setenv(names[n], keep[n].c_str(), 1);
    else unsetenv(names[n]);
  }
}

// gated_matmul of several rows through cuBLASLt (one [M, 2F] product, then the activation) against
// matmul on each half then gated_act (the halves may take other GEMM algorithms: rounding only).
void check_gated_matmul_rows(int64_t m, int64_t f, int64_t k, DType d) {
  Pair x = make({m, k}, d), w = make({2 * f, k}, d, -0.05, 0.05);
  Tensor gate = Tensor::empty({m, f}, d, Device::kCUDA), up = Tensor::empty({m, f}, d, Device::kCUDA);
  ops::matmul(x.dev, w.dev.slice_rows(0, f), nullptr, gate);
  ops::matmul(x.dev, w.dev.slice_rows(f, 2 * f), nullptr, up);
  Tensor ref = poisoned({m, f}, d), got = poisoned({m, f}, d);
  ops::gated_act(gate, up, Activation::kSiLU, ref);
  ops::gated_matmul(x.dev, w.dev, nullptr, Activation::kSiLU, got);
  report("gated_matmul rows M=" + std::to_string(m) + " F=" + std::to_string(f) + " K=" + std::to_string(k) + " " + dn(d),
         nmse(to_vec(got), to_vec(ref)), 1e-4);
}

// argmax against a host scan: first maximum, ties to the lower index, NaN skipped.
void check_argmax(int64_t rows, int64_t n, DType d) {
  Pair x = make({rows, n}, d, -5, 5);
  Vec host = x.host;
  for (int64_t r = 0; r < rows; ++r) {  // a tie at the maximum (later copy must lose), a NaN
    const int64_t a = (r * 7919) % n, b = (a + n / 2 + 1) % n;
    host[r * n + std::min(a, b)] = 9.0;
    host[r * n + std::max(a, b)] = 9.0;
    host[r * n + (a + 3) % n] = NAN;
  }
  Tensor dev = host_tensor(host, {rows, n}, d).to(Device::kCUDA);
  Tensor idx = Tensor::empty({rows}, DType::I32, Device::kCUDA);
  ops::argmax(dev, idx);
  Vec got = to_vec(idx), ref(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
      double v = host[r * n + i];
      if (std::isnan(v)) continue;
      if (best < 0 || v > host[r * n + best]) best = i;
    }
    ref[r] = static_cast<double>(best);
  }
  report("argmax rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " " + dn(d), nmse(got, ref), 0.0);
}

// A recorded graph: its ops read an input buffer rewritten between replays and write into the
// graph's arena; each replay must equal the eager ops on that input.
void check_graph() {
  Backend& be = backend(Device::kCUDA);
  const int64_t h = 4096;
  Pair w = make({h}, DType::BF16);
  Tensor in = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
  Pair wm = make({1000, h}, DType::BF16, -0.05, 0.05), wg = make({2 * 1000, h}, DType::BF16, -0.05, 0.05);
  if (!be.begin_capture()) {
    ++failures;
    std::printf("FAIL graph capture is not available\n");
    return;
  }
  std::unique_ptr<DeviceGraph> graph;
  Tensor y, idx, z;
  try {
    y = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
    Tensor tmp = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
    ops::rms_norm(in, w.dev, 1e-5f, false, tmp);
    ops::add(tmp, in, y);
    idx = Tensor::empty({1}, DType::I32, Device::kCUDA);
    ops::argmax(y, idx);
    Tensor m1 = Tensor::empty({1, 1000}, DType::BF16, Device::kCUDA);  // GEMV chain (programmatic launches)
    ops::gated_matmul(y, wg.dev, nullptr, Activation::kSiLU, m1);
    z = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
    Tensor wt = wm.dev.reshape({h, 1000});
    ops::matmul(m1, wt, nullptr, z);
    graph = be.end_capture();
  } catch (const Error& e) {
    be.abort_capture();
    throw;
  }
  for (int round = 0; round < 3; ++round) {
    Pair x = make({1, h}, DType::BF16, -3, 3);
    in.copy_from(x.dev);
    graph->launch();
    Tensor ey = Tensor::empty({1, h}, DType::BF16, Device::kCUDA), et = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
    ops::rms_norm(x.dev, w.dev, 1e-5f, false, et);
    ops::add(et, x.dev, ey);
    Tensor eidx = Tensor::empty({1}, DType::I32, Device::kCUDA);
    ops::argmax(ey, eidx);
    report("graph replay " + std::to_string(round) + " == eager (rms_norm, add)", nmse(to_vec(y), to_vec(ey)), 0.0);
    report("graph replay " + std::to_string(round) + " == eager (argmax)", nmse(to_vec(idx), to_vec(eidx)), 0.0);
    Tensor em = Tensor::empty({1, 1000}, DType::BF16, Device::kCUDA), ez = Tensor::empty({1, h}, DType::BF16, Device::kCUDA);
    ops::gated_matmul(ey, wg.dev, nullptr, Activation::kSiLU, em);
    ops::matmul(em, wm.dev.reshape({h, 1000}), nullptr, ez);
    report("graph replay " + std::to_string(round) + " == eager (gated_matmul, matmul)", nmse(to_vec(z), to_vec(ez)), 0.0);
  }
  bool refused = false;
  if (be.begin_capture()) {
    try {
      Tensor t = Tensor::empty({4}, DType::F32, Device::kCUDA);
      Tensor host = Tensor::zeros({4}, DType::F32);
      t.copy_from(host);  // a host copy inside a capture must fail cleanly
    } catch (const Error&) {
      refused = true;
    }
    be.abort_capture();
  }
  if (!refused) ++failures;
  std::printf("%-4s a host copy inside a capture is a typed error, and the capture is discarded\n", refused ? "ok" : "FAIL");
  ops::rms_norm(in, w.dev, 1e-5f, false, in);  // eager work still runs after the aborted capture
  be.synchronize();
}

void check_oom() {
  bool ok = false;
  try {
    Tensor t = Tensor::empty({int64_t(1) << 40, 1024}, DType::F32, Device::kCUDA);
  } catch (const Error& e) {
    ok = e.code() == ErrorCode::kOutOfMemory && std::string(e.what()).find("MiB") != std::string::npos;
    std::printf("     (oom message: %s)\n", e.what());
  }
  if (!ok) ++failures;
  std::printf("%-4s out-of-memory is a typed kOutOfMemory error naming the size\n", ok ? "ok" : "FAIL");
}

// ---------------------------------------------------------------- timing
void bench() {
  std::printf("\n-- timing (bf16, Llama-3 8B shapes)\n");
  struct G { int64_t n, k; const char* what; } gs[] = {
      {6144, 4096, "qkv"}, {4096, 4096, "o"}, {28672, 4096, "gate+up"}, {4096, 14336, "down"}, {128256, 4096, "lm_head"}};
  for (auto& g : gs) {
    // Several weight copies so that repeated runs do not hit L2.
    std::vector<Tensor> ws;
    for (int i = 0; i < 4; ++i) ws.push_back(Tensor::empty({g.n, g.k}, DType::BF16, Device::kCUDA));
    for (auto& w : ws) ops::convert(make({g.n * g.k}, DType::F32).dev, w);
    for (int64_t m : {1, 4}) {
      Tensor x = make({m, g.k}, DType::BF16).dev, y = Tensor::empty({m, g.n}, DType::BF16, Device::kCUDA);
      int i = 0;
      double ms = time_ms([&] { ops::matmul(x, ws[i++ % 4], nullptr, y); }, 200);
      double gbs = g.n * g.k * 2.0 / (ms * 1e-3) / 1e9;
      std::printf("gemv  M=%ld %-8s N=%6ld K=%6ld  %8.1f us  %7.0f GB/s\n", (long)m, g.what, (long)g.n, (long)g.k, ms * 1e3, gbs);
    }
    Tensor x = make({512, g.k}, DType::BF16).dev, y = Tensor::empty({512, g.n}, DType::BF16, Device::kCUDA);
    double ms = time_ms([&] { ops::matmul(x, ws[0], nullptr, y); }, 50);
    std::printf("gemm  M=512 %-8s N=%6ld K=%6ld  %8.1f us  %7.1f TFLOP/s\n", g.what, (long)g.n, (long)g.k, ms * 1e3,
                2.0 * 512 * g.n * g.k / (ms * 1e-3) / 1e12);
  }
  for (auto [t, dh] : std::vector<std::pair<int64_t, int64_t>>{{512, 128}, {2048, 128}, {512, 64}}) {
    Tensor q = make({t, 32, dh}, DType::BF16).dev, k = make({8, t, dh}, DType::BF16).dev, v = make({8, t, dh}, DType::BF16).dev;
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(i);
    Tensor p = make_ints(pos).dev, out = Tensor::empty({t, 32, dh}, DType::BF16, Device::kCUDA);
    AttentionArgs a;
    a.scale = 0.088f;
    double ms = time_ms([&] { ops::attention(q, k, v, p, p, a, out); }, 20);
    double flops = 4.0 * 32 * dh * (t * (t + 1) / 2.0);
    std::printf("flash attention T=S=%ld Hq=32 Hkv=8 D=%ld causal  %8.1f us  %6.1f TFLOP/s\n", (long)t, (long)dh, ms * 1e3,
                flops / (ms * 1e-3) / 1e12);
  }
  for (int64_t s : {512, 4096}) {
    Tensor q = make({1, 32, 128}, DType::BF16).dev, k = make({8, s, 128}, DType::BF16).dev, v = make({8, s, 128}, DType::BF16).dev;
    std::vector<int32_t> kp(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) kp[i] = static_cast<int32_t>(i);
    Tensor kpt = make_ints(kp).dev, qpt = make_ints({static_cast<int32_t>(s - 1)}).dev;
    Tensor out = Tensor::empty({1, 32, 128}, DType::BF16, Device::kCUDA);
    AttentionArgs a;
    a.scale = 0.088f;
    double ms = time_ms([&] { ops::attention(q, k, v, qpt, kpt, a, out); }, 200);
    std::printf("decode attention S=%ld Hq=32 Hkv=8 D=128  %8.1f us  %7.0f GB/s\n", (long)s, ms * 1e3, 2.0 * 8 * s * 128 * 2 / (ms * 1e-3) / 1e9);
  }
}

// ---------------------------------------------------------------- few-row GEMM (matmul_rows.cu)
// Plain and gated (act(x gate^T) * (x up^T)) products of 9..32 rows against float64, and against
// the cuBLASLt path (MLXB_ROWS_GEMM=0) within rounding.
void check_rows_gemm(int64_t m, int64_t n, int64_t k, DType d, bool bias, const Activation* act) {
  const int64_t f = act ? n / 2 : n;
  Pair x = make({m, k}, d), w = make({n, k}, d, -0.1, 0.1), b = make({n}, d);
  Tensor got = poisoned({m, f}, d), base = poisoned({m, f}, d);
  auto run = [&](bool on, Tensor& y) {
    cuda::set_rows_gemm_enabled(on);
    if (act) ops::gated_matmul(x.dev, w.dev, bias ? &b.dev : nullptr, *act, y);
    else ops::matmul(x.dev, w.dev, bias ? &b.dev : nullptr, y);
  };
  run(false, base);
  run(true, got);
  Vec ref(static_cast<size_t>(m * f));
  auto dot = [&](int64_t i, int64_t j) {
    double s = bias ? b.host[j] : 0.0;
    for (int64_t kk = 0; kk < k; ++kk) s += x.host[i * k + kk] * w.host[j * k + kk];
    return s;
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      if (!act) {
        ref[i * f + j] = dot(i, j);
        continue;
      }
      const double g = dot(i, j), u = dot(i, f + j);
      const double a = *act == Activation::kSiLU ? g / (1 + std::exp(-g))
                       : *act == Activation::kGeluExact ? 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)))
                                                        : 0.5 * g * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
      ref[i * f + j] = a * u;
    }
  char name[160];
  std::snprintf(name, sizeof name, "rows_gemm M=%ld N=%ld K=%ld %s%s%s", (long)m, (long)n, (long)k, dn(d), bias ? " +bias" : "",
                act ? " gated" : "");
  const Vec gv = to_vec(got);
  report(name, nmse(gv, ref), act ? tol_for(d, 1e-4, 1e-5) : tol_for(d));
  report(std::string(name) + " vs cuBLASLt path", nmse(gv, to_vec(base)), act ? tol_for(d, 1e-4, 1e-5) : tol_for(d));
}

void check_rows_cases() {
  const DType B = DType::BF16, H = DType::F16;
  const Activation silu = Activation::kSiLU, gelu = Activation::kGeluTanh;
  for (int64_t m : {9, 16, 17, 24, 31, 32}) {
    check_rows_gemm(m, 6144, 4096, B, false, nullptr);
    check_rows_gemm(m, 300, 256, B, true, nullptr);
    check_rows_gemm(m, 2 * 200, 384, B, false, &silu);
  }
  check_rows_gemm(32, 4096, 4096, B, false, nullptr);
  check_rows_gemm(32, 4096, 14336, B, false, nullptr);
  check_rows_gemm(32, 2 * 14336, 4096, B, false, &silu);
  check_rows_gemm(13, 1000, 1024, H, true, nullptr);
  check_rows_gemm(29, 2 * 1000, 2048, H, true, &gelu);
  check_rows_gemm(32, 130, 128, B, false, nullptr);
  for (const char* slices : {"1", "3", "7", "64"}) {  // forced K slices (uneven ones, one stage each)
    setenv("MLXB_ROWS_SLICES", slices, 1);
    check_rows_gemm(32, 4096, 4096, B, false, nullptr);
    check_rows_gemm(20, 2 * 640, 1024, B, true, &silu);
  }
  unsetenv("MLXB_ROWS_SLICES");
}

// The serving shapes at m rows: cuBLASLt (MLXB_ROWS_GEMM=0) against the few-row GEMM at each
// slice, weights rotated over 4 copies, 200 launches each (the few-row kernel is launched
// programmatically, so consecutive launches overlap their weight requests as in a recorded step).
void bench_rows(int64_t m) {
  struct G { const char* name; int64_t n, k; bool gated; } gs[] = {
      {"8B q/k/v", 6144, 4096, false}, {"8B o", 4096, 4096, false}, {"8B gate+up+act", 28672, 4096, true},
      {"8B down", 4096, 14336, false}, {"1B q/k/v", 3072, 2048, false}, {"1B o", 2048, 2048, false},
      {"1B gate+up+act", 16384, 2048, true}, {"1B down", 2048, 8192, false}};
  for (auto& g : gs) {
    std::vector<Tensor> ws;
    const Tensor src = make({g.n * g.k}, DType::F32, -0.05, 0.05).dev;
    for (int i = 0; i < 4; ++i) {
      ws.push_back(Tensor::empty({g.n, g.k}, DType::BF16, Device::kCUDA));
      ops::convert(src, ws.back());
    }
    Tensor x = make({m, g.k}, DType::BF16).dev, y = Tensor::empty({m, g.gated ? g.n / 2 : g.n}, DType::BF16, Device::kCUDA);
    int it = 0;
    auto once = [&] {
      const Tensor& w = ws[static_cast<size_t>(it++ % 4)];
      if (g.gated) ops::gated_matmul(x, w, nullptr, Activation::kSiLU, y);
      else ops::matmul(x, w, nullptr, y);
    };
    const double gb = 2.0 * g.n * g.k / 1e9;
    cuda::set_rows_gemm_enabled(false);
    const double base = time_ms(once, 200) * 1e3;
    std::printf("rows M=%ld %-16s cuBLASLt %7.1f us %6.0f GB/s |", (long)m, g.name, base, gb / (base * 1e-6));
    cuda::set_rows_gemm_enabled(true);
    for (const char* slices : {"", "1", "2", "4", "8", "11"}) {
      setenv("MLXB_ROWS_SLICES", slices, 1);
      const double us = time_ms(once, 200) * 1e3;
      std::printf(" %s %.1f", *slices ? slices : "default", us);
    }
    unsetenv("MLXB_ROWS_SLICES");
    std::printf(" us (by K slices)\n");
  }
  cuda::set_rows_gemm_enabled(false);
}

// Every cuBLASLt candidate of the serving step's products at m rows (bf16, 4 weight copies); with
// `all`, every configuration by algorithm id too, for the 8B products.
void lt_sweep(int64_t m, bool all) {
  struct G { int64_t n, k; } gs[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096},
                                     {3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}};
  for (auto& g : gs) {
    if (all && g.k != 14336 && g.k != 4096) continue;
    std::vector<Tensor> ws;
    std::vector<const void*> wp;
    const Tensor src = make({g.n * g.k}, DType::F32, -0.05, 0.05).dev;
    for (int i = 0; i < 4; ++i) {
      ws.push_back(Tensor::empty({g.n, g.k}, DType::BF16, Device::kCUDA));
      ops::convert(src, ws.back());
      wp.push_back(ws.back().data());
    }
    Tensor x = make({m, g.k}, DType::BF16).dev, y = Tensor::empty({m, g.n}, DType::BF16, Device::kCUDA);
    backend(Device::kCUDA).synchronize();
    cuda::cublaslt_sweep(m, g.n, g.k, DType::BF16, x.data(), wp.data(), 4, y.data(), 32, 100, all);
  }
}

}  // namespace

// The paged attention cases (the full run and --paged): single-block kernel shapes, then the split
// decode kernel: long rows (up to 32 splits and, past 4096 keys, 256-key splits), window + softcap
// over several splits, GQA 1/2/4, head 64.
void check_paged_cases() {
  const DType F = DType::F32, B = DType::BF16;
  check_rope_paged(33, 32, 8, 128, false, 0, 700);
  check_rope_paged(17, 32, 8, 64, false, 0, 3000);
  check_rope_paged(9, 16, 8, 128, true, 0, 300);
  check_rope_paged(12, 8, 8, 64, false, 100, 1500);
  check_rope_paged(5, 8, 2, 128, false, 0, 200);
  check_paged_attention(32, 32, 8, 128, B);
  check_paged_attention(7, 8, 8, 64, F);
  check_paged_attention(12, 16, 2, 256, B);
  check_paged_attention(32, 32, 8, 64, B);
  check_paged_attention(9, 8, 4, 128, B, 37, 30.0f);
  check_paged_attention(5, 4, 4, 64, B, 0, 0.0f);
  check_paged_attention(32, 32, 8, 128, B, 0, 0.0f, 700);
  check_paged_attention(11, 32, 8, 128, B, 0, 0.0f, 6000);
  check_paged_attention(10, 16, 8, 64, B, 0, 0.0f, 1500);
  check_paged_attention(9, 8, 8, 128, B, 300, 50.0f, 1200);
  check_paged_attention(13, 32, 8, 64, B, 0, 0.0f, 640);
}

int main(int argc, char** argv) {
  if (skip_without_cuda()) return 0;
  bool do_bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  const bool paged_bench = argc > 1 && std::strcmp(argv[1], "--paged-bench") == 0;  // the timing alone (profilers)
  const bool paged_check = argc > 1 && std::strcmp(argv[1], "--paged-check") == 0;  // the checks alone
  if (paged_check) {
    try {
      check_paged_cases();
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return exit_status(failures);
  }
  if (paged_bench || (argc > 1 && std::strcmp(argv[1], "--paged") == 0)) {  // only the paged attention checks and timing
    try {
      if (!paged_bench) check_paged_cases();
      bench_paged(32, 128);
      bench_paged(32, 64);
      bench_paged(8, 128);
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return exit_status(failures);
  }
  if (argc > 1 && std::strcmp(argv[1], "--stream-probe") == 0) {
    try {
      cuda::stream_probe();
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--rows-bench") == 0) {  // the timings alone (profilers)
    bench_rows(32);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--rows") == 0) {
    try {
      check_rows_cases();
      bench_rows(32);
      bench_rows(16);
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return exit_status(failures);
  }
  if (argc > 1 && std::strcmp(argv[1], "--lt-sweep") == 0) {
    try {
      lt_sweep(argc > 2 ? std::atol(argv[2]) : 32, argc > 3 && std::strcmp(argv[3], "--all") == 0);
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--sample") == 0) {
    try {
      sample_check::run(Device::kCUDA, true, failures);
      sample_check::bench(Device::kCUDA);
    } catch (const Error& e) {
      std::printf("FAIL exception: %s\n", e.what());
      return 1;
    }
    return exit_status(failures);
  }
  try {
    const DType F = DType::F32, B = DType::BF16, H = DType::F16;
    // matmul: GEMV (M <= 8, vector and scalar paths), cuBLASLt, SIMT fallback (mixed dtypes).
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 4096, 4096}, {1, 1000, 1001}, {3, 257, 129}, {8, 511, 1000},
                                                                            {9, 300, 264}, {100, 1025, 513}, {512, 1024, 2048}, {33, 7, 5}})
      for (auto [xd, wd] : std::vector<std::pair<DType, DType>>{{F, F}, {F, B}, {B, B}, {H, H}, {F, H}, {B, F}})
        check_matmul(m, n, k, xd, wd, (m + n) % 2 == 1);
    check_matmul(300, 129, 1000, B, B, true);
    // The 32-row 8B serving products, which take cublaslt.cc's built-in configurations on sm_90.
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{6144, 4096}, {4096, 4096}, {4096, 14336}}) check_matmul(32, n, k, B, B, false);
    for (DType d : {F, B, H}) {
      check_rms_norm(5, 4096, d, false);
      check_rms_norm(3, 1001, d, true);
      check_rms_norm(64, 96, d, false);
      check_layer_norm(7, 1030, d, true);
      check_layer_norm(2, 4096, d, false);
      check_softmax(9, 1000, d);
      check_softmax(2, 128256, d);
      check_rope(13, 5, 128, 128, false, 1.0f, d);
      check_rope(7, 3, 96, 32, true, 1.2f, d);
      check_rope(5, 4, 256, 256, false, 1.0f, d);
      check_gated(7, 14336, Activation::kSiLU, d);
      check_gated(3, 1001, Activation::kGeluExact, d);
      check_gated(3, 1001, Activation::kGeluTanh, d);
      check_elementwise(100003, d);
      check_embedding(1000, 2048, 17, d, d);
      for (DType e : {F, B, H}) check_convert(10007, d, e);
    }
    check_embedding(517, 300, 9, B, F);
    check_kv_write(7, 8, 128, 100, 160, B, B);
    check_kv_write(5, 2, 64, 64, 64, F, B);
    check_kv_write(3, 4, 80, 33, 40, F, F);
    const AttnCase cases[] = {
        {"prefill causal", 300, 8, 2, 300, 128, 0, true, 0, 0.0f, false, B},
        {"prefill causal", 300, 8, 2, 300, 128, 0, true, 0, 0.0f, false, H},
        {"prefill causal", 150, 8, 2, 150, 128, 0, true, 0, 0.0f, false, F},
        {"window+softcap", 200, 4, 4, 200, 64, 0, true, 37, 30.0f, false, B},
        {"window+softcap", 70, 4, 4, 70, 64, 0, true, 37, 30.0f, false, F},
        {"gemma head 256", 100, 4, 1, 100, 256, 0, true, 0, 50.0f, false, B},
        {"chunk after prefix", 70, 8, 8, 570, 128, 600, true, 0, 0.0f, false, B},
        {"rotating slots", 40, 4, 2, 256, 128, 256, true, 128, 0.0f, true, B},
        {"non-causal", 33, 4, 2, 47, 64, 0, false, 0, 0.0f, false, B},
        {"head 80 (split path)", 50, 4, 2, 50, 80, 0, true, 0, 0.0f, false, B},
        {"decode", 1, 32, 8, 1000, 128, 1024, true, 0, 0.0f, false, B},
        {"decode", 1, 32, 8, 1000, 128, 1024, true, 0, 0.0f, false, F},
        {"decode rotating", 1, 8, 2, 512, 128, 512, true, 400, 0.0f, true, B},
        {"decode softcap", 3, 16, 8, 777, 256, 800, true, 0, 50.0f, false, B},
        // One query row on Hopper: the cluster kernel (attention_cluster.cu): head dims 64/128/256, 1 to
        // 16 query heads per key/value head, one stage per block and several, windows, soft-caps.
        {"decode 1B shape", 1, 32, 8, 600, 64, 1024, true, 0, 0.0f, false, B},
        {"decode gqa 8 head 256 window softcap", 1, 16, 2, 900, 256, 1024, true, 300, 30.0f, false, B},
        {"decode gqa 16 long", 1, 16, 1, 3000, 128, 3000, true, 0, 0.0f, false, H},
        {"decode mha short", 1, 8, 8, 5, 128, 0, true, 0, 0.0f, false, B},
        {"decode gqa 6 rotating", 1, 12, 2, 300, 64, 0, true, 200, 0.0f, true, B},
        {"decode non-causal", 1, 4, 4, 70, 64, 0, false, 0, 0.0f, false, H},
        {"long prefill", 1024, 4, 1, 1024, 128, 0, true, 0, 0.0f, false, B},
        // The mma flash kernel (attention_mma.cu): rows are (token, head of the group) pairs, 64 per
        // block; odd T, GQA 1/2/4/8, windows, soft-caps, head dims 64/128/256, chunks after a prefix.
        {"mma gqa 8", 77, 32, 4, 77, 128, 0, true, 0, 0.0f, false, B},
        {"mma gqa 4 odd T", 333, 16, 4, 333, 128, 0, true, 0, 0.0f, false, B},
        {"mma mha head 64", 129, 8, 8, 129, 64, 0, true, 0, 0.0f, false, H},
        {"mma head 256 window softcap", 300, 8, 4, 300, 256, 0, true, 100, 50.0f, false, B},
        {"mma window gqa 4", 257, 16, 4, 257, 128, 0, true, 64, 0.0f, false, B},
        {"mma chunk after prefix", 100, 32, 8, 1100, 128, 1200, true, 0, 0.0f, false, B},
        {"mma rotating slots", 64, 8, 2, 700, 128, 700, true, 512, 0.0f, true, H},
        {"mma non-causal head 256", 40, 8, 2, 90, 256, 0, false, 0, 0.0f, false, B},
        {"mma head 64 window softcap", 213, 32, 8, 213, 64, 0, true, 50, 30.0f, false, B},
        {"mma 16 rows", 16, 4, 4, 16, 128, 0, true, 0, 0.0f, false, B},
    };
    for (const auto& c : cases) check_attention(c);
    check_attention_strided_q(200, 32, 8, 128, B);
    check_attention_strided_q(70, 8, 2, 64, H);
    check_attention_strided_q(5, 8, 2, 128, B);  // under 16 rows: a contiguous copy, other kernels
    check_kv_len_hint(601, 1024, 128, B);
    check_kv_len_hint(3, 4096, 128, B);
    check_kv_len_hint(3000, 4096, 64, B);
    check_kv_len_hint(17, 64, 256, H);
    check_kv_len_hint(100, 256, 256, F);
    for (DType d : {F, B, H}) {
      check_add_rms_norm(1, 4096, d, false);
      check_add_rms_norm(5, 1001, d, true);
      check_argmax(1, 128256, d);
      check_argmax(3, 1000, d);
    }
    check_argmax(2, 7, F);
    check_rope_kv_write(1, 32, 8, 128, 128, false, B, B);
    check_rope_kv_write(3, 4, 2, 96, 32, true, B, F);
    check_rope_kv_write(2, 8, 4, 256, 256, false, F, F);
    check_rope_kv_write(1, 6, 2, 64, 48, false, H, H);
    check_gated_matmul(1, 14336, 4096, B, false, Activation::kSiLU);
    check_gated_matmul(1, 1001, 1000, B, true, Activation::kGeluTanh);
    check_gated_matmul(1, 300, 264, H, false, Activation::kGeluExact);
    check_gated_matmul(1, 100, 1001, B, false, Activation::kSiLU);  // generic path (K % 8 != 0)
    check_gated_matmul(3, 100, 256, F, true, Activation::kSiLU);    // generic path (f32, 3 rows)
    check_gated_matmul(8, 1000, 512, B, true, Activation::kGeluTanh);  // several rows, GEMV: exact
    check_gated_matmul_rows(32, 14336, 4096, B);
    check_gated_matmul_rows(100, 1000, 520, H);
    check_gated_matmul_rows(9, 1001, 264, B);  // F % 8 != 0: the scalar activation kernel
    check_gated_matmul_rows(512, 1024, 256, F);
    check_rope_kv_write_strided(32, 32, 8, 128, B);
    check_rope_kv_write_strided(5, 8, 2, 64, F);
    check_paged_cases();
    check_graph();
    check_oom();
    // --- device sampling (sample.cu) against the host Sampler: test/native/sample_check.h
    sample_check::run(Device::kCUDA, true, failures);
    if (do_bench) sample_check::bench(Device::kCUDA);
    // --- end of device sampling
    if (do_bench) bench();
  } catch (const Error& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  return exit_status(failures);
}
