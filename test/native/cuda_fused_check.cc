// The fused one-row ops of ops.h (matmul_add, norm_matmul, norm_gated_matmul, norm_qkv_rope) on
// CUDA against the ops they fuse, run unfused on the same device: every output element (and
// every cache element) must be bit-identical. Awkward shapes cover each branch of the kernel
// (rms_norm's 128/256/512-thread reductions and its looped rows, odd row counts, biases, Gemma's
// 1 + w, a skipped cache slot, f16; rows longer than one batch, partial batches, more units than
// resident warps) and the generic fallbacks (K % 8 != 0, rows too long to stage, partial rotary).
// Without a GPU it prints "skipped" and exits 0.
//   cuda_fused_check            all cases
//   cuda_fused_check --bench    also times fused against unfused at Llama-3 1B / 8B decode shapes
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"

#include "check.h"

using namespace mlxb;

namespace {

std::mt19937 rng(4321);
int failures = 0;

Tensor make(const Shape& shape, DType d, float lo = -1.0f, float hi = 1.0f) {
  Tensor h = Tensor::empty(shape, DType::F32, Device::kCPU);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i) h.ptr<float>()[i] = u(rng);
  Tensor dev = Tensor::empty(shape, d, Device::kCUDA);
  ops::convert(h.to(Device::kCUDA), dev);
  return dev;
}

Tensor ints(const std::vector<int32_t>& v) {
  Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32, Device::kCPU);
  std::memcpy(h.data(), v.data(), v.size() * sizeof(int32_t));
  return h.to(Device::kCUDA);
}

Tensor copy(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::kCUDA);
  y.copy_from(x);
  return y;
}

void report(const std::string& name, int64_t bad) {
  if (bad) ++failures;
  std::printf("%-4s %-84s %ld differing\n", bad ? "FAIL" : "ok", name.c_str(), static_cast<long>(bad));
}

const char* dn(DType d) { return d == DType::BF16 ? "bf16" : d == DType::F16 ? "f16" : "f32"; }

std::string shape_name(const char* op, int64_t n, int64_t k, DType d, bool bias, bool add_one = false) {
  return std::string(op) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " " + dn(d) + (bias ? " +bias" : "") +
         (add_one ? " 1+w" : "");
}

void check_matmul_add(int64_t n, int64_t k, DType d, bool bias) {
  Tensor x = make({1, k}, d), w = make({n, k}, d, -0.1f, 0.1f), b = make({n}, d), r = make({1, n}, d, -4, 4);
  Tensor ref = copy(r), got = copy(r), branch = Tensor::empty({1, n}, d, Device::kCUDA);
  ops::matmul(x, w, bias ? &b : nullptr, branch);
  ops::add(ref, branch, ref);
  ops::matmul_add(x, w, bias ? &b : nullptr, got);
  report(shape_name("matmul_add", n, k, d, bias) + " == matmul; add", mismatches(got, ref));
}

void check_norm_matmul(int64_t n, int64_t k, DType d, bool bias, bool add_one) {
  Tensor x = make({1, k}, d, -3, 3), nw = make({k}, d, 0.5f, 1.5f), w = make({n, k}, d, -0.1f, 0.1f), b = make({n}, d);
  Tensor normed = Tensor::empty({1, k}, d, Device::kCUDA), ref = Tensor::empty({1, n}, d, Device::kCUDA);
  ops::rms_norm(x, nw, 1e-5f, add_one, normed);
  ops::matmul(normed, w, bias ? &b : nullptr, ref);
  Tensor got = Tensor::empty({1, n}, d, Device::kCUDA);
  ops::norm_matmul(x, NormArgs{nw, 1e-5f, add_one}, w, bias ? &b : nullptr, got);
  report(shape_name("norm_matmul", n, k, d, bias, add_one) + " == rms_norm; matmul", mismatches(got, ref));
}

void check_norm_gated(int64_t f, int64_t k, DType d, bool bias, Activation act) {
  Tensor x = make({1, k}, d, -3, 3), nw = make({k}, d, 0.5f, 1.5f), w = make({2 * f, k}, d, -0.1f, 0.1f), b = make({2 * f}, d);
  Tensor normed = Tensor::empty({1, k}, d, Device::kCUDA), ref = Tensor::empty({1, f}, d, Device::kCUDA);
  ops::rms_norm(x, nw, 1e-6f, false, normed);
  ops::gated_matmul(normed, w, bias ? &b : nullptr, act, ref);
  Tensor got = Tensor::empty({1, f}, d, Device::kCUDA);
  ops::norm_gated_matmul(x, NormArgs{nw, 1e-6f, false}, w, bias ? &b : nullptr, act, got);
  report(shape_name("norm_gated_matmul", 2 * f, k, d, bias) + " act " + std::to_string(static_cast<int>(act)) +
             " == rms_norm; gated_matmul",
         mismatches(got, ref));
}

RopeArgs rope_args(int64_t rot, float mscale) {
  Tensor f = Tensor::empty({rot / 2}, DType::F32, Device::kCPU);
  for (int64_t i = 0; i < rot / 2; ++i) f.ptr<float>()[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / rot));
  RopeArgs a;
  a.inv_freq = f.to(Device::kCUDA);
  a.rot_dim = rot;
  a.mscale = mscale;
  return a;
}

void check_norm_qkv_rope(int64_t hq, int64_t hkv, int64_t dim, int64_t rot, int64_t hidden, DType d, bool bias, int32_t slot,
                         bool caches) {
  const int64_t cap = 40, n = (hq + 2 * hkv) * dim;
  Tensor x = make({1, hidden}, d, -3, 3), nw = make({hidden}, d, 0.5f, 1.5f), w = make({n, hidden}, d, -0.1f, 0.1f), b = make({n}, d);
  Tensor kc = make({hkv, cap, dim}, d), vc = make({hkv, cap, dim}, d);
  Tensor pos = ints({1234}), slots = ints({slot});
  RopeArgs a = rope_args(rot, 1.05f);
  // Unfused: rms_norm, matmul, rope of the q and k heads, kv_write of k and v.
  Tensor normed = Tensor::empty({1, hidden}, d, Device::kCUDA), ref = Tensor::empty({1, n}, d, Device::kCUDA);
  Tensor kc1 = copy(kc), vc1 = copy(vc);
  ops::rms_norm(x, nw, 1e-5f, false, normed);
  ops::matmul(normed, w, bias ? &b : nullptr, ref);
  Tensor flat = ref.reshape({n});
  Tensor qk = flat.slice_rows(0, (hq + hkv) * dim).reshape({1, hq + hkv, dim});
  ops::rope(qk, pos, a);
  if (caches) {
    ops::kv_write(flat.slice_rows(hq * dim, (hq + hkv) * dim).reshape({1, hkv, dim}), slots, kc1);
    ops::kv_write(flat.slice_rows((hq + hkv) * dim, n).reshape({1, hkv, dim}), slots, vc1);
  }
  Tensor got = Tensor::empty({1, n}, d, Device::kCUDA), kc2 = copy(kc), vc2 = copy(vc);
  Tensor none;
  ops::norm_qkv_rope(x, NormArgs{nw, 1e-5f, false}, w, bias ? &b : nullptr, QkvShape{hq, hkv, dim}, pos, a, caches ? slots : none,
                     kc2, vc2, got);
  std::string name = "norm_qkv_rope Hq=" + std::to_string(hq) + " Hkv=" + std::to_string(hkv) + " D=" + std::to_string(dim) +
                     " rot=" + std::to_string(rot) + " H=" + std::to_string(hidden) + " " + dn(d) + (bias ? " +bias" : "") +
                     (caches ? " slot " + std::to_string(slot) : " no cache");
  report(name + " == rms_norm; matmul; rope; kv_write",
         mismatches(got, ref) + mismatches(kc2, kc1) + mismatches(vc2, vc1));
}

// ---------------------------------------------------------------- timing
struct Shapes {
  const char* name;
  int64_t hidden, ffn, heads, kv_heads, dim;
};

void bench(const Shapes& s) {
  const DType d = DType::BF16;
  const int64_t h = s.hidden, qkv_n = (s.heads + 2 * s.kv_heads) * s.dim, qd = s.heads * s.dim;
  constexpr int kCopies = 4;  // weights rotated so that repeated runs do not hit L2
  std::vector<Tensor> wqkv, wo, wgu, wdown;
  for (int i = 0; i < kCopies; ++i) {
    wqkv.push_back(make({qkv_n, h}, d, -0.05f, 0.05f));
    wo.push_back(make({h, qd}, d, -0.05f, 0.05f));
    wgu.push_back(make({2 * s.ffn, h}, d, -0.05f, 0.05f));
    wdown.push_back(make({h, s.ffn}, d, -0.05f, 0.05f));
  }
  Tensor x = make({1, h}, d), nw = make({h}, d, 0.5f, 1.5f), normed = Tensor::empty({1, h}, d, Device::kCUDA);
  Tensor qkv = Tensor::empty({1, qkv_n}, d, Device::kCUDA), o = make({1, qd}, d), branch = Tensor::empty({1, h}, d, Device::kCUDA);
  Tensor act = make({1, s.ffn}, d), gated = Tensor::empty({1, s.ffn}, d, Device::kCUDA);
  Tensor kc = make({s.kv_heads, 1024, s.dim}, d), vc = make({s.kv_heads, 1024, s.dim}, d), pos = ints({600}), slot = ints({600});
  RopeArgs a = rope_args(s.dim, 1.0f);
  const NormArgs norm{nw, 1e-5f, false};
  int i = 0;
  auto row = [&](const char* what, double bytes, double unfused, double fused) {
    std::printf("%s %-28s unfused %7.1f us  fused %7.1f us  (%5.0f GB/s)\n", s.name, what, unfused * 1e3, fused * 1e3,
                bytes / (fused * 1e-3) / 1e9);
  };
  Tensor none;
  double u = time_ms([&] {
    Tensor& w = wqkv[i++ % kCopies];
    ops::rms_norm(x, nw, 1e-5f, false, normed);
    ops::matmul(normed, w, nullptr, qkv);
    Tensor q = qkv.reshape({1, s.heads + 2 * s.kv_heads, s.dim});
    Tensor qk = q.reshape({qkv_n}).slice_rows(0, (s.heads + s.kv_heads) * s.dim).reshape({1, s.heads + s.kv_heads, s.dim});
    ops::rope(qk, pos, a);
  }, 200);
  double f = time_ms([&] { ops::norm_qkv_rope(x, norm, wqkv[i++ % kCopies], nullptr, QkvShape{s.heads, s.kv_heads, s.dim}, pos, a, slot,
                                              kc, vc, qkv); }, 200);
  row("norm+qkv+rope(+kv write)", 2.0 * qkv_n * h, u, f);
  u = time_ms([&] { ops::matmul(o, wo[i++ % kCopies], nullptr, branch); ops::add(x, branch, x); }, 200);
  f = time_ms([&] { ops::matmul_add(o, wo[i++ % kCopies], nullptr, x); }, 200);
  row("o + residual add", 2.0 * h * qd, u, f);
  u = time_ms([&] {
    ops::rms_norm(x, nw, 1e-5f, false, normed);
    ops::gated_matmul(normed, wgu[i++ % kCopies], nullptr, Activation::kSiLU, gated);
  }, 200);
  f = time_ms([&] { ops::norm_gated_matmul(x, norm, wgu[i++ % kCopies], nullptr, Activation::kSiLU, gated); }, 200);
  row("norm+gate/up+act", 4.0 * s.ffn * h, u, f);
  u = time_ms([&] { ops::matmul(act, wdown[i++ % kCopies], nullptr, branch); ops::add(x, branch, x); }, 200);
  f = time_ms([&] { ops::matmul_add(act, wdown[i++ % kCopies], nullptr, x); }, 200);
  row("down + residual add", 2.0 * h * s.ffn, u, f);
  // Decode attention as a recorded step runs it: S = capacity 1024, 600 visible (kv_len hint).
  Tensor q = make({1, s.heads, s.dim}, d), out = Tensor::empty({1, s.heads, s.dim}, d, Device::kCUDA);
  std::vector<int32_t> kp(1024);
  for (int j = 0; j < 1024; ++j) kp[j] = j < 600 ? j : -1;
  Tensor kpt = ints(kp), qpt = ints({599}), len = ints({600});
  AttentionArgs aa;
  aa.scale = 0.088f;
  aa.kv_len = len;
  double ms = time_ms([&] { ops::attention(q, kc, vc, qpt, kpt, aa, out); }, 200);
  std::printf("%s decode attention cap 1024, 600 keys  %7.1f us\n", s.name, ms * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  if (skip_without_cuda()) return 0;
  const bool do_bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  const DType B = DType::BF16, H = DType::F16;
  try {
    for (DType d : {B, H}) {
      check_matmul_add(4096, 4096, d, false);
      check_matmul_add(2048, 8192, d, true);
      check_matmul_add(1001, 14336, d, false);
      check_matmul_add(77, 264, d, true);
      check_matmul_add(50, 100, d, false);  // K % 8 != 0: generic path
      check_norm_matmul(3072, 2048, d, false, false);   // rms_norm with 512 threads, 4 per thread
      check_norm_matmul(6144, 4096, d, true, false);    // 512 threads, 8 per thread
      check_norm_matmul(1000, 5120, d, false, true);    // 512 threads, looped row
      check_norm_matmul(333, 1000, d, true, true);      // 256 threads
      check_norm_matmul(129, 264, d, false, false);     // 128 threads
      check_norm_matmul(64, 10240, d, false, false);    // the longest staged row with norm weights
      check_norm_matmul(64, 10248, d, false, false);    // generic path (row too long to stage)
      check_matmul_add(40, 20480, d, false);            // the longest staged row
      check_matmul_add(40, 20488, d, true);             // generic path
      check_norm_gated(8192, 2048, d, false, Activation::kSiLU);
      check_norm_gated(1001, 1000, d, true, Activation::kGeluTanh);
      check_norm_gated(300, 264, d, false, Activation::kGeluExact);
      check_norm_qkv_rope(32, 8, 64, 64, 2048, d, false, 17, true);
      check_norm_qkv_rope(32, 8, 128, 128, 4096, d, false, 39, true);
      check_norm_qkv_rope(8, 2, 128, 128, 1000, d, true, 0, true);
      check_norm_qkv_rope(4, 4, 256, 256, 2560, d, true, -1, true);  // skipped slot: caches unchanged
      check_norm_qkv_rope(6, 2, 96, 96, 1024, d, false, 5, false);   // no cache writes (eager steps)
      check_norm_qkv_rope(4, 2, 64, 32, 512, d, false, 3, true);     // partial rotary: generic path
    }
    if (do_bench) {
      std::printf("\n-- timing (bf16, one decode row; weights rotated over 4 copies)\n");
      bench({"1B", 2048, 8192, 32, 8, 64});
      bench({"8B", 4096, 14336, 32, 8, 128});
    }
  } catch (const Error& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  return exit_status(failures);
}
