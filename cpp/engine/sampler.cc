// The sampling chain of sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "core/error.h"

namespace mlxb {

namespace {

void check(bool ok, const char* field, const std::string& what) {
  if (!ok) fail(ErrorCode::kInvalidArgument, std::string(field) + " " + what, field);
}

// Ranking: higher value first, lower id on ties.
struct Ranked {
  bool operator()(const std::pair<int32_t, double>& a, const std::pair<int32_t, double>& b) const {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  }
};

using Candidate = std::pair<int32_t, double>;

// The lowest-ranked member of the smallest rank-prefix of `w` whose weight reaches `need`; the
// last one when all of `w` weighs less. Reorders `w`. Expected O(n): each round partitions the
// unsettled range around its middle rank and keeps the half holding the boundary.
Candidate select_last(std::vector<Candidate>& w, double need) {
  Ranked rank;
  // Invariants: [lo, hi) holds exactly the ranks lo..hi-1; the top lo weigh `above` < need.
  size_t lo = 0, hi = w.size();
  double above = 0;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(w.begin() + static_cast<std::ptrdiff_t>(lo), w.begin() + static_cast<std::ptrdiff_t>(mid),
                     w.begin() + static_cast<std::ptrdiff_t>(hi), rank);
    double left = 0;
    for (size_t i = lo; i < mid; ++i) left += w[i].second;
    if (above + left >= need) {
      hi = mid;
    } else {
      above += left;
      lo = mid;
    }
  }
  return w[lo];
}

// The same for candidates with weights in (0, 1] (0 < need <= total), in two passes over `c`:
// a histogram of the weights finds the bucket where the cumulative mass crosses `need` (every
// lighter bucket ranks below, every heavier one above), then selection runs on that bucket only.
Candidate nucleus_last(const std::vector<Candidate>& c, double need, std::vector<double>& mass, std::vector<Candidate>& scratch) {
  constexpr int kBuckets = 4096;
  auto bucket = [](double w) { return std::clamp(static_cast<int>((1.0 - w) * kBuckets), 0, kBuckets - 1); };
  // Four interleaved histograms, summed afterwards in a fixed order: consecutive tokens of similar
  // weight hit one bucket, and a single histogram made every add wait for the previous one.
  constexpr size_t kWays = 4;  // the sum below names the four
  mass.assign(kWays * kBuckets, 0.0);
  for (size_t i = 0; i < c.size(); ++i) mass[(i % kWays) * kBuckets + static_cast<size_t>(bucket(c[i].second))] += c[i].second;
  for (size_t j = 0; j < kBuckets; ++j) mass[j] = (mass[j] + mass[kBuckets + j]) + (mass[2 * kBuckets + j] + mass[3 * kBuckets + j]);
  double above = 0;
  int b = 0;
  for (; b < kBuckets - 1; ++b) {
    if (above + mass[static_cast<size_t>(b)] >= need) break;
    above += mass[static_cast<size_t>(b)];
  }
  scratch.clear();
  for (const Candidate& e : c)
    if (bucket(e.second) == b) scratch.push_back(e);
  return select_last(scratch, need - above);
}

}  // namespace

Sampler::Sampler(const SamplingParams& p, int64_t vocab) : params_(p), vocab_(vocab) {
  check(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(), "vocab", "must be in [1, 2^31)");
  check(std::isfinite(p.temperature) && p.temperature >= 0, "temperature", "must be a finite number >= 0");
  check(p.top_k >= 0, "topK", "must be >= 0");
  check(std::isfinite(p.top_p) && p.top_p > 0 && p.top_p <= 1, "topP", "must be in (0, 1]");
  check(std::isfinite(p.min_p) && p.min_p >= 0 && p.min_p <= 1, "minP", "must be in [0, 1]");
  check(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0, "repetitionPenalty", "must be a finite number > 0");
  check(std::isfinite(p.presence_penalty), "presencePenalty", "must be finite");
  check(std::isfinite(p.frequency_penalty), "frequencyPenalty", "must be finite");
  check(p.penalty_window >= 0, "repetitionContextSize", "must be >= 0");
  check(p.top_logprobs >= 0 && p.top_logprobs <= vocab, "topLogprobs", "must be in [0, vocab]");
  for (const auto& [tok, bias] : p.logit_bias) {
    check(tok >= 0 && tok < vocab, "logitBias", "token id " + std::to_string(tok) + " is outside the vocabulary");
    check(std::isfinite(bias), "logitBias", "values must be finite");
  }
  if (p.has_seed) {
    rng_.reseed(p.seed);
  } else {
    std::random_device rd;
    rng_.reseed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

void Sampler::accept(int32_t token) {
  if (params_.penalty_window == 0) return;
  window_.push_back(token);
  ++counts_[token];
  if (static_cast<int64_t>(window_.size()) > params_.penalty_window) {
    int32_t old = window_.front();
    window_.pop_front();
    if (--counts_[old] == 0) counts_.erase(old);
  }
}

void Sampler::accept(const int32_t* tokens, int64_t n) {
  // Only the last `penalty_window` tokens can matter.
  int64_t start = std::max<int64_t>(0, n - params_.penalty_window);
  for (int64_t i = start; i < n; ++i) accept(tokens[i]);
}

void Sampler::reset_history() {
  window_.clear();
  counts_.clear();
}

void Sampler::process(float* logits) const {
  for (const auto& [tok, bias] : params_.logit_bias) logits[tok] += bias;
  const double rp = params_.repetition_penalty;
  for (const auto& [tok, count] : counts_) {
    if (tok < 0 || tok >= vocab_) continue;  // ids outside the head (never produced by it)
    double l = logits[tok];
    if (rp != 1.0) l = l > 0 ? l / rp : l * rp;
    l -= params_.presence_penalty + params_.frequency_penalty * count;
    logits[tok] = static_cast<float>(l);
  }
}

void Sampler::candidates(const float* x, std::vector<std::pair<int32_t, double>>& c) const {
  // c is not cleared here: its storage (and size) carries over between calls (see below).
  float vmax = -std::numeric_limits<float>::infinity();
  int64_t best = -1;
  bool nan = false;
  for (int64_t i = 0; i < vocab_; ++i) {
    const float v = x[i];
    nan |= std::isnan(v);
    if (v > vmax) { vmax = v; best = i; }
  }
  if (nan) {
    const int64_t at = std::find_if(x, x + vocab_, [](float v) { return std::isnan(v); }) - x;
    fail(ErrorCode::kInternal, "the model produced NaN logits (token " + std::to_string(at) + ")");
  }
  if (best < 0) fail(ErrorCode::kInternal, "every logit is -inf: no token can be sampled");
  if (params_.temperature == 0) {
    c.assign(1, Candidate(static_cast<int32_t>(best), 1.0));
    return;
  }

  const double inv_t = 1.0 / params_.temperature;
  // Candidates in id order with weight exp((x - max) / T); weights below e^-80 (relative to the
  // best token's 1) are dropped: they cannot be drawn in double precision sums anyway.
  // With top-k, only the best k are kept while scanning: once more than k qualify, c is a heap
  // whose front is the lowest-ranked kept candidate (one comparison per token, no 150k-entry
  // vector), sorted by rank at the end - the same set and order as sorting every candidate.
  Ranked rank;
  const size_t k = params_.top_k > 0 && params_.top_k < vocab_ ? static_cast<size_t>(params_.top_k) : 0;
  // Written through a pointer into c sized for the worst case (grown once, shrunk to the count
  // after): push_back per token was a call per token on a 150k vocabulary.
  const size_t cap = k ? k : static_cast<size_t>(vocab_);
  if (c.size() < cap) c.resize(cap);
  Candidate* out = c.data();
  size_t n = 0;
  bool sorted = false;  // out[0, k) is a heap (then sorted by rank) rather than in id order
  for (int64_t i = 0; i < vocab_; ++i) {
    const double z = (static_cast<double>(x[i]) - vmax) * inv_t;
    if (!(z > -80.0)) continue;
    if (k == 0) {  // no ranking by z: the weight right away (saves a pass over the vocabulary)
      out[n++] = Candidate(static_cast<int32_t>(i), static_cast<double>(std::exp(static_cast<float>(z))));
      continue;
    }
    const Candidate e(static_cast<int32_t>(i), z);
    if (n < k) {
      out[n++] = e;
      continue;
    }
    if (!sorted) {
      std::make_heap(out, out + n, rank);
      sorted = true;
    }
    if (rank(e, out[0])) {
      std::pop_heap(out, out + n, rank);
      out[n - 1] = e;
      std::push_heap(out, out + n, rank);
    }
  }
  c.resize(n);
  if (sorted) std::sort_heap(c.begin(), c.end(), rank);
  // Weights; the best token has weight 1. Single-precision exp (relative error ~1e-7, far below
  // anything a draw can resolve) is twice as fast as double on a 150k vocabulary.
  if (k != 0)
    for (auto& e : c) e.second = static_cast<double>(std::exp(static_cast<float>(e.second)));
  if (params_.top_p < 1.0) {
    double total = 0;
    for (const auto& e : c) total += e.second;
    const double need = params_.top_p * total;
    if (sorted) {
      double cum = 0;
      size_t keep = 0;
      while (keep < c.size() && cum < need) cum += c[keep++].second;
      c.resize(keep);
    } else {
      // The nucleus without sorting the vocabulary: find the last token it takes by selection,
      // then keep every candidate ranked at or above it, still in id order.
      const Candidate last = nucleus_last(c, need, mass_, select_);
      c.erase(std::remove_if(c.begin(), c.end(), [&](const auto& e) { return rank(last, e); }), c.end());
    }
  }
  if (params_.min_p > 0) {
    // Relative to the most likely token, whose weight is 1 after the shift above.
    const double cut = params_.min_p;
    c.erase(std::remove_if(c.begin(), c.end(), [cut](const auto& e) { return e.second < cut; }), c.end());
  }
  // Draw order: by rank after top-k, by id otherwise; both fixed for given logits.
}

std::vector<float> Sampler::distribution(const float* logits) const {
  std::vector<float> x(logits, logits + vocab_);
  process(x.data());
  std::vector<Candidate> c;
  candidates(x.data(), c);
  double total = 0;
  for (const auto& e : c) total += e.second;
  std::vector<float> p(static_cast<size_t>(vocab_), 0.f);
  for (const auto& e : c) p[static_cast<size_t>(e.first)] = static_cast<float>(e.second / total);
  return p;
}

SampleResult Sampler::sample(const float* logits) {
  std::vector<float>& x = work_;  // reused: no allocation per token
  x.assign(logits, logits + vocab_);
  process(x.data());
  std::vector<Candidate>& c = cand_;
  candidates(x.data(), c);

  SampleResult r;
  if (c.size() == 1) {
    r.token = c[0].first;
  } else {
    double total = 0;
    for (const auto& e : c) total += e.second;
    const double u = rng_.uniform() * total;
    double cum = 0;
    r.token = c.back().first;  // u * total rounded up to total: the last candidate
    for (const auto& e : c) {
      cum += e.second;
      if (u < cum) { r.token = e.first; break; }
    }
  }

  if (!params_.logprobs && params_.top_logprobs == 0) return r;
  // Log-probabilities under the processed logits (before temperature and filters).
  double vmax = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab_; ++i) vmax = std::max<double>(vmax, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(x[i]) - vmax);
  const double lse = vmax + std::log(sum);
  r.logprob = static_cast<float>(x[r.token] - lse);
  if (params_.top_logprobs > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab_));
    for (int64_t i = 0; i < vocab_; ++i) idx[i] = static_cast<int32_t>(i);
    const size_t k = static_cast<size_t>(params_.top_logprobs);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return x[a] != x[b] ? x[a] > x[b] : a < b;
    });
    for (size_t i = 0; i < k; ++i) r.top.push_back({idx[i], static_cast<float>(x[idx[i]] - lse)});
  }
  return r;
}

}  // namespace mlxb
