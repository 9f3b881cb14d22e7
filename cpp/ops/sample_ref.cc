// The generic Backend::sample: the sampling chain of engine/sampler.h written the plain way (a full
// sort of the candidates by rank), for CPU tensors. The host Sampler is the fast CPU path; this is
// the reference the device kernels are checked against and the fallback of a backend without one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "ops/ops.h"

namespace mlxb {

namespace {

SampleOut sample_row(const float* logits, int64_t vocab, const SampleArgs& a) {
  std::vector<float> x(logits, logits + vocab);
  for (int64_t s = 0; s < a.n_special; ++s) {
    const SampleSpecial& e = a.special[s];
    if (e.token < 0 || e.token >= vocab) fail(ErrorCode::kInvalidArgument, "sample: special token outside the vocabulary");
    float v = x[static_cast<size_t>(e.token)];
    if (e.has_bias) v += e.bias;
    if (e.count > 0) {
      double l = v;
      if (a.repetition_penalty != 1.0) l = l > 0 ? l / a.repetition_penalty : l * a.repetition_penalty;
      l -= a.presence_penalty + a.frequency_penalty * e.count;
      v = static_cast<float>(l);
    }
    x[static_cast<size_t>(e.token)] = v;
  }
  SampleOut out;
  float vmax = -std::numeric_limits<float>::infinity();
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(x[static_cast<size_t>(i)])) return SampleOut{static_cast<int32_t>(i), kSampleNaN};
    if (x[static_cast<size_t>(i)] > vmax) { vmax = x[static_cast<size_t>(i)]; best = i; }
  }
  if (best < 0) return SampleOut{0, kSampleNoToken};
  if (a.temperature == 0) return SampleOut{static_cast<int32_t>(best), kSampleSingle};
  // Candidates ranked: higher logit first, lower id on ties.
  std::vector<int32_t> c;
  for (int64_t i = 0; i < vocab; ++i)
    if ((static_cast<double>(x[static_cast<size_t>(i)]) - vmax) * a.inv_temperature > -80.0) c.push_back(static_cast<int32_t>(i));
  std::sort(c.begin(), c.end(), [&](int32_t p, int32_t q) {
    return x[static_cast<size_t>(p)] != x[static_cast<size_t>(q)] ? x[static_cast<size_t>(p)] > x[static_cast<size_t>(q)] : p < q;
  });
  const bool top_k = a.top_k > 0 && a.top_k < vocab;
  if (top_k && static_cast<int64_t>(c.size()) > a.top_k) c.resize(static_cast<size_t>(a.top_k));
  std::vector<std::pair<int32_t, double>> w;
  for (int32_t i : c) {
    const double z = (static_cast<double>(x[static_cast<size_t>(i)]) - vmax) * a.inv_temperature;
    w.emplace_back(i, static_cast<double>(std::exp(static_cast<float>(z))));
  }
  if (a.top_p < 1.0) {
    double total = 0;
    for (const auto& e : w) total += e.second;
    const double need = a.top_p * total;
    double cum = 0;
    size_t keep = 0;
    while (keep < w.size() && cum < need) cum += w[keep++].second;
    w.resize(keep);
  }
  if (a.min_p > 0) w.erase(std::remove_if(w.begin(), w.end(), [&](const auto& e) { return e.second < a.min_p; }), w.end());
  if (w.size() == 1) return SampleOut{w[0].first, kSampleSingle};
  // Draw order: by rank after top-k, by id otherwise (as the host sampler).
  if (!top_k) std::sort(w.begin(), w.end());
  double total = 0;
  for (const auto& e : w) total += e.second;
  const double u = a.uniform * total;
  double cum = 0;
  for (const auto& e : w) {
    cum += e.second;
    if (u < cum) return SampleOut{e.first, kSampleDrew};
  }
  return SampleOut{w.back().first, kSampleDrew};
}

}  // namespace

void Backend::sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out) {
  if (logits.device() != Device::kCPU || logits.dtype() != DType::F32 || !logits.is_contiguous() || logits.ndim() < 1)
    fail(ErrorCode::kUnsupported, "sample: the generic op takes a contiguous float32 CPU tensor: " + logits.describe());
  const int64_t vocab = logits.dim(-1), nrows = vocab == 0 ? 0 : logits.numel() / vocab;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleArgs& a = rows[r];
    if (a.row < 0 || a.row >= nrows) fail(ErrorCode::kInvalidArgument, "sample: row " + std::to_string(a.row) + " outside the logits");
    out[r] = sample_row(logits.ptr<float>() + a.row * vocab, vocab, a);
  }
}

}  // namespace mlxb
