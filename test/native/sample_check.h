// Sampling checks shared by the native programs: ops::sample on `device` (the CUDA kernels, or the
// generic sort-based op on the CPU) against the host Sampler of engine/sampler.h, given the same
// logits and the same seed:
// - token agreement: each draw, the host Sampler samples and a second Sampler with the same seed
//   gives ops::sample its device_args; the tokens must agree except at float near-ties (the sums
//   run in another order and CUDA's expf differs from the host's by an ulp), counted and bounded;
// - distribution: many draws of one row (one call, one uniform per entry) against
//   Sampler::distribution() by a chi-square test, and no draw outside the kept set;
// - statuses: NaN and all -inf rows, greedy, one-candidate rows (the generator must not move).
// Each check prints one line; failures are counted in `failures` of the including file.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/dtype.h"
#include "engine/sampler.h"
#include "ops/ops.h"

namespace sample_check {

using namespace mlxb;

struct Case {
  std::string name;
  int64_t vocab;
  DType dtype;
  SamplingParams p;
  double scale;      // logits ~ N(0, scale); 0: all equal (ties everywhere)
  int draws;
};

inline float round_logit(double v, DType d) {
  const float f = static_cast<float>(v);
  if (d == DType::BF16) return bf16_to_f32(f32_to_bf16(f));
  if (d == DType::F16) return f16_to_f32(f32_to_f16(f));
  return f;
}

inline Tensor logits_tensor(const std::vector<float>& v, int64_t rows, int64_t vocab, DType d, Device dev) {
  Tensor t = Tensor::empty({rows, vocab}, d, Device::kCPU);
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == DType::F32) t.ptr<float>()[i] = v[i];
    else if (d == DType::BF16) t.ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
    else t.ptr<uint16_t>()[i] = f32_to_f16(v[i]);
  }
  return dev == Device::kCPU ? t : t.to(dev);
}

// On the CPU the generic op takes float32 only: the dtype is the rounding of the values.
inline DType storage(DType d, Device dev) { return dev == Device::kCPU ? DType::F32 : d; }

inline std::vector<float> random_row(std::mt19937& g, int64_t vocab, double scale, DType d) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = round_logit(scale * n(g), d);
  return v;
}

// Token agreement over `draws` draws (new logits every 8 draws). Returns the mismatches.
inline int agreement(const Case& c, Device dev, std::mt19937& g, int& failures) {
  SamplingParams p = c.p;
  p.has_seed = true;
  p.seed = 0x5eed + static_cast<uint64_t>(c.vocab);
  Sampler host(p, c.vocab), device(p, c.vocab);
  CHECK(device.device_ok(), "%s: not device-eligible", c.name.c_str());
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab - 1));
  for (int i = 0; i < 40; ++i) {  // a penalty window with repeats
    const int32_t t = i % 3 == 0 ? 7 % static_cast<int32_t>(c.vocab) : tok(g);
    host.accept(t);
    device.accept(t);
  }
  int mismatch = 0;
  std::vector<float> row;
  Tensor t;
  for (int d = 0; d < c.draws; ++d) {
    if (d % 8 == 0) {
      row = c.scale > 0 ? random_row(g, c.vocab, c.scale, c.dtype) : std::vector<float>(static_cast<size_t>(c.vocab), 0.f);
      t = logits_tensor(row, 1, c.vocab, storage(c.dtype, dev), dev);
    }
    const int32_t want = host.sample(row.data()).token;
    std::vector<SampleSpecial> special;
    std::vector<SampleArgs> args(1, device.device_args(special));
    args[0].special = special.data();
    SampleOut out;
    ops::sample(t, args, &out);
    const int32_t got = device.device_done(out);
    if (got != want) ++mismatch;
    host.accept(want);  // both windows see the same history
    device.accept(want);
  }
  return mismatch;
}

// Chi-square of `n` draws from one row against the host distribution. Returns the statistic's
// excess over its bound (<= 0 passes) and counts draws outside the kept set in `outside`.
inline double chi_square(const Case& c, Device dev, std::mt19937& g, int n, int& outside, int& df) {
  SamplingParams p = c.p;
  p.has_seed = true;
  p.seed = 99;
  Sampler s(p, c.vocab);
  const std::vector<float> row = random_row(g, c.vocab, c.scale, c.dtype);
  const std::vector<float> prob = s.distribution(row.data());
  std::vector<SampleSpecial> special;
  SampleArgs a = s.device_args(special);
  a.special = special.data();
  std::vector<SampleArgs> args(static_cast<size_t>(n), a);
  Rng r(12345);
  for (SampleArgs& e : args) e.uniform = r.uniform();
  std::vector<SampleOut> out(args.size());
  ops::sample(logits_tensor(row, 1, c.vocab, storage(c.dtype, dev), dev), args, out.data());
  std::vector<double> count(static_cast<size_t>(c.vocab), 0.0);
  outside = 0;
  for (const SampleOut& o : out) {
    if (o.token < 0 || o.token >= c.vocab || prob[static_cast<size_t>(o.token)] == 0.f) ++outside;
    else count[static_cast<size_t>(o.token)] += 1;
  }
  // Bins: tokens expected >= 5 times, the rest pooled.
  double chi = 0, pool_e = 0, pool_o = 0;
  df = -1;
  for (int64_t i = 0; i < c.vocab; ++i) {
    const double e = n * static_cast<double>(prob[static_cast<size_t>(i)]);
    if (e == 0) continue;
    if (e < 5) {
      pool_e += e;
      pool_o += count[static_cast<size_t>(i)];
      continue;
    }
    chi += (count[static_cast<size_t>(i)] - e) * (count[static_cast<size_t>(i)] - e) / e;
    ++df;
  }
  if (pool_e >= 5) {
    chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
    ++df;
  }
  if (df < 1) return 0;
  return chi - (df + 6.0 * std::sqrt(2.0 * df));  // ~ p < 1e-6 for these df
}

inline SamplingParams params(double t, int64_t k, double top_p, double min_p) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

inline void statuses(Device dev, int& failures) {
  const int64_t v = 1000;
  std::vector<float> row(static_cast<size_t>(2 * v), 0.5f);
  row[17] = NAN;
  row[400] = NAN;
  for (int64_t i = v; i < 2 * v; ++i) row[static_cast<size_t>(i)] = -INFINITY;
  Tensor t = logits_tensor(row, 2, v, DType::F32, dev);
  SampleArgs a;
  a.temperature = 1.0;
  a.inv_temperature = 1.0;
  std::vector<SampleArgs> args(2, a);
  args[1].row = 1;
  std::vector<SampleOut> out(2);
  ops::sample(t, args, out.data());
  CHECK(out[0].status == kSampleNaN && out[0].token == 17, "NaN row: status %d token %d", out[0].status, out[0].token);
  CHECK(out[1].status == kSampleNoToken, "all -inf row: status %d", out[1].status);
  // One candidate left (min-p 0.5 under a clear maximum): the generator must not move, so the
  // next real draw (a flat row) uses the same uniform as the host sampler's.
  SamplingParams p = params(1.0, 0, 1.0, 0.5);
  p.has_seed = true;
  p.seed = 5;
  Sampler s(p, v), ref(p, v);
  std::vector<float> r2(static_cast<size_t>(v), 0.f);
  r2[123] = 5.f;
  std::vector<SampleSpecial> sp;
  std::vector<SampleArgs> one(1, s.device_args(sp));
  SampleOut o;
  ops::sample(logits_tensor(r2, 1, v, DType::F32, dev), one, &o);
  CHECK(o.token == 123 && o.status == kSampleSingle, "single: token %d status %d", o.token, o.status);
  (void)s.device_done(o);
  (void)ref.sample(r2.data());
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> r3(static_cast<size_t>(v), 0.f);
    one[0] = s.device_args(sp);
    ops::sample(logits_tensor(r3, 1, v, DType::F32, dev), one, &o);
    CHECK(o.status == kSampleDrew, "flat row: status %d", o.status);
    const int32_t got = s.device_done(o), want = ref.sample(r3.data()).token;
    CHECK(got == want, "draw %d after a single-candidate step: %d vs host %d", i, got, want);
  }
  std::printf("sample statuses (NaN, all -inf, single candidate) %s\n", dev == Device::kCPU ? "cpu" : "cuda");
}

inline std::vector<Case> cases(bool large) {
  const DType F = DType::F32, B = DType::BF16;
  const int64_t big = large ? 151936 : 32000;
  std::vector<Case> c;
  auto add = [&](std::string name, int64_t vocab, DType d, SamplingParams p, double scale, int draws) {
    c.push_back(Case{std::move(name), vocab, d, std::move(p), scale, draws});
  };
  add("temperature 1", big, F, params(1.0, 0, 1.0, 0.0), 3.0, 48);
  add("temperature 0.7 bf16", big, B, params(0.7, 0, 1.0, 0.0), 3.0, 48);
  add("top-p 0.9", big, F, params(1.0, 0, 0.9, 0.0), 3.0, 48);
  add("top-p 0.9 bf16 (ties)", big, B, params(0.8, 0, 0.9, 0.0), 2.0, 48);
  add("top-p 0.5 flat (all tied)", big, F, params(1.0, 0, 0.5, 0.0), 0.0, 16);
  add("top-k 50", big, F, params(1.0, 50, 1.0, 0.0), 3.0, 48);
  add("top-k 40 top-p 0.9 min-p 0.05", big, B, params(0.9, 40, 0.9, 0.05), 2.0, 48);
  add("top-k 1000 flat (ties past the buffer)", big, F, params(1.0, 1000, 1.0, 0.0), 0.0, 16);
  add("top-k 1024 top-p 0.95", big, F, params(1.2, 1024, 0.95, 0.0), 1.0, 32);
  add("min-p 0.1", big, F, params(1.0, 0, 1.0, 0.1), 3.0, 48);
  add("top-p 0.9 min-p 0.02 t 1.5", 1000, F, params(1.5, 0, 0.9, 0.02), 2.0, 64);
  add("top-k 7 of 50", 50, F, params(1.0, 7, 1.0, 0.0), 1.0, 64);
  add("top-k >= vocab", 50, F, params(1.0, 80, 0.8, 0.0), 1.0, 64);
  add("greedy", big, B, params(0.0, 0, 1.0, 0.0), 3.0, 16);
  SamplingParams pen = params(1.0, 20, 0.95, 0.0);
  pen.repetition_penalty = 1.3;
  pen.presence_penalty = 0.5;
  pen.frequency_penalty = 0.2;
  pen.logit_bias = {{7, 4.0f}, {11, -100.0f}, {12, 2.5f}};
  add("penalties + bias top-k 20", big, F, pen, 2.0, 48);
  SamplingParams pen2 = pen;
  pen2.top_k = 0;
  pen2.top_p = 0.9;
  add("penalties + bias top-p bf16", big, B, pen2, 2.0, 48);
  SamplingParams g = params(0.0, 0, 1.0, 0.0);
  g.repetition_penalty = 1.5;
  g.logit_bias = {{3, 50.0f}};
  add("greedy + penalties + bias", 1000, F, g, 2.0, 16);
  return c;
}

// Runs every check on `dev`; `large` uses a 151936-token vocabulary (the demo model's).
inline void run(Device dev, bool large, int& failures) {
  std::mt19937 g(4242);
  const char* where = dev == Device::kCPU ? "cpu" : "cuda";
  int total_draws = 0, total_mismatch = 0;
  for (const Case& c : cases(large)) {
    const int m = agreement(c, dev, g, failures);
    total_draws += c.draws;
    total_mismatch += m;
    // Near-ties only: a few per cent at most on these random rows (0 expected for most cases).
    const bool ok = m <= std::max(1, c.draws / 16);
    CHECK(ok, "%s: %d of %d draws differ from the host sampler", c.name.c_str(), m, c.draws);
    std::printf("sample %s %s vocab=%lld: %d/%d draws differ from the host Sampler %s\n", where, c.name.c_str(),
                static_cast<long long>(c.vocab), m, c.draws, ok ? "ok" : "FAIL");
  }
  std::printf("sample %s: %d/%d draws differ in all\n", where, total_mismatch, total_draws);
  const std::vector<Case> dist = {
      {"t 0.8 top-k 10", 40, DType::F32, params(0.8, 10, 1.0, 0.0), 2.0, 0},
      {"top-p 0.8", 40, DType::F32, params(1.0, 0, 0.8, 0.0), 2.0, 0},
      {"min-p 0.05 bf16", 64, DType::BF16, params(1.0, 0, 1.0, 0.05), 1.5, 0},
      {"top-k 20 top-p 0.9 t 1.3", 300, DType::F32, params(1.3, 20, 0.9, 0.0), 1.5, 0},
  };
  for (const Case& c : dist) {
    int outside = 0, df = 0;
    const double excess = chi_square(c, dev, g, 20000, outside, df);
    CHECK(excess <= 0 && outside == 0, "%s: chi-square excess %.2f (df %d), %d draws outside the kept set", c.name.c_str(), excess,
          df, outside);
    std::printf("sample %s distribution %s: 20000 draws, chi-square - bound %.2f (df %d), outside %d %s\n", where, c.name.c_str(),
                excess, df, outside, excess <= 0 && outside == 0 ? "ok" : "FAIL");
  }
  statuses(dev, failures);
}

// Per-step time of ops::sample (upload of the arguments, the kernel, the token copy back) at the
// demo model's vocabulary: one row and a batch of 32.
inline void bench(Device dev) {
  std::mt19937 g(7);
  const int64_t v = 151936;
  for (int rows : {1, 32}) {
    std::vector<float> all;
    for (int r = 0; r < rows; ++r) {
      std::vector<float> row = random_row(g, v, 3.0, DType::BF16);
      all.insert(all.end(), row.begin(), row.end());
    }
    Tensor t = logits_tensor(all, rows, v, DType::BF16, dev);
    for (const auto& [name, p] : std::vector<std::pair<const char*, SamplingParams>>{
             {"greedy", params(0.0, 0, 1.0, 0.0)},
             {"temperature", params(0.8, 0, 1.0, 0.0)},
             {"top-p 0.9", params(1.0, 0, 0.9, 0.0)},
             {"top-k 50", params(1.0, 50, 1.0, 0.0)},
             {"top-k 50 top-p 0.9 min-p 0.05", params(1.0, 50, 0.9, 0.05)}}) {
      Sampler s(p, v);
      std::vector<SampleSpecial> sp;
      std::vector<SampleArgs> args(static_cast<size_t>(rows), s.device_args(sp));
      for (int r = 0; r < rows; ++r) args[static_cast<size_t>(r)].row = r;
      std::vector<SampleOut> out(args.size());
      const double ms = time_ms([&] { ops::sample(t, args, out.data()); }, 50, dev);
      std::printf("bench sample %s rows=%d vocab=%lld bf16: %.1f us per step\n", name, rows, static_cast<long long>(v), ms * 1000.0);
    }
  }
}

}  // namespace sample_check
