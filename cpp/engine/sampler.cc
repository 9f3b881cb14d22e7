// The sampling chain of sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
// Buckets are 1/64 of an octave of the weight (its float bits: the weights are float exps, and
// positive floats order as their bits), so a flat row's thousands of tiny weights spread over
// many buckets instead of filling the last one of a linear scale.
Candidate nucleus_last(const Candidate* c, size_t n, double need, std::vector<double>& mass, std::vector<Candidate>& scratch) {
  constexpr int kShift = 17;                           // 2^(23 - 17) = 64 buckets per octave
  constexpr int kBuckets = (0x3F800000 >> kShift) + 1;  // weight 1 (bits 0x3F800000) down to 0
  auto bucket = [](double w) {
    uint32_t bits;
    const float f = static_cast<float>(w);
    std::memcpy(&bits, &f, sizeof(bits));
    return static_cast<int>((0x3F800000u - std::min(bits, 0x3F800000u)) >> kShift);
  };
  // Four interleaved histograms, summed afterwards in a fixed order: consecutive tokens of similar
  // weight hit one bucket, and a single histogram made every add wait for the previous one.
  constexpr size_t kWays = 4;  // the sum below names the four
  mass.assign(kWays * kBuckets, 0.0);
  for (size_t i = 0; i < n; ++i) mass[(i % kWays) * kBuckets + static_cast<size_t>(bucket(c[i].second))] += c[i].second;
  for (size_t j = 0; j < kBuckets; ++j) mass[j] = (mass[j] + mass[kBuckets + j]) + (mass[2 * kBuckets + j] + mass[3 * kBuckets + j]);
  double above = 0;
  int b = 0;
  for (; b < kBuckets - 1; ++b) {
    if (above + mass[static_cast<size_t>(b)] >= need) break;
    above += mass[static_cast<size_t>(b)];
  }
  scratch.clear();
  for (size_t i = 0; i < n; ++i)
    if (bucket(c[i].second) == b) scratch.push_back(c[i]);
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
  for (const auto& e : p.logit_bias) bias_ids_.push_back(e.first);
  std::sort(bias_ids_.begin(), bias_ids_.end());
  device_ok_ = device_sampling_enabled() && !p.logprobs && p.top_logprobs == 0 &&
               (p.top_k == 0 || p.top_k >= vocab || p.top_k <= kDeviceMaxTopK) &&
               std::adjacent_find(bias_ids_.begin(), bias_ids_.end()) == bias_ids_.end() &&
               p.logit_bias.size() + static_cast<size_t>(std::min<int64_t>(p.penalty_window, vocab)) <= (size_t{1} << 16);
  if (p.has_seed) {
    rng_.reseed(p.seed);
  } else {
    std::random_device rd;
    rng_.reseed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

bool device_sampling_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_DEVICE_SAMPLING");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

SampleArgs Sampler::device_args(std::vector<SampleSpecial>& special) const {
  SampleArgs a;
  a.temperature = params_.temperature;
  a.inv_temperature = params_.temperature > 0 ? 1.0 / params_.temperature : 0.0;
  a.top_k = params_.top_k;
  a.top_p = params_.top_p;
  a.min_p = params_.min_p;
  a.repetition_penalty = params_.repetition_penalty;
  a.presence_penalty = params_.presence_penalty;
  a.frequency_penalty = params_.frequency_penalty;
  if (params_.temperature > 0) {
    Rng next = rng_;
    a.uniform = next.uniform();
  }
  special.clear();
  for (const auto& [tok, bias] : params_.logit_bias) {
    SampleSpecial e;
    e.token = tok;
    e.bias = bias;
    e.has_bias = 1;
    special.push_back(e);
  }
  // With every penalty off, process() leaves the window's logits as they are: no entries.
  const bool penalties = params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 || params_.frequency_penalty != 0.0;
  if (penalties) {
    for (SampleSpecial& e : special) {
      const auto it = counts_.find(e.token);
      if (it != counts_.end()) e.count = it->second;
    }
    for (const auto& [tok, count] : counts_) {
      if (tok < 0 || tok >= vocab_ || std::binary_search(bias_ids_.begin(), bias_ids_.end(), tok)) continue;
      SampleSpecial e;
      e.token = tok;
      e.count = count;
      special.push_back(e);
    }
  }
  a.n_special = static_cast<int64_t>(special.size());
  return a;
}

int32_t Sampler::device_done(const SampleOut& out) {
  if (out.status == kSampleNaN) fail(ErrorCode::kInternal, "the model produced NaN logits (token " + std::to_string(out.token) + ")");
  if (out.status == kSampleNoToken) fail(ErrorCode::kInternal, "every logit is -inf: no token can be sampled");
  if (out.token < 0 || out.token >= vocab_) fail(ErrorCode::kInternal, "device sampling returned a token outside the vocabulary");
  if (out.status == kSampleDrew) (void)rng_.uniform();
  return out.token;
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

size_t Sampler::candidates(const float* x, std::vector<std::pair<int32_t, double>>& c) const {
  // c only grows: the candidates are its first n entries (the count is returned). Shrinking it to
  // n made the next call's resize value-initialise the regrown tail (a pass over 150k entries).
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
    if (c.empty()) c.resize(1);
    c[0] = Candidate(static_cast<int32_t>(best), 1.0);
    return 1;
  }

  const double inv_t = 1.0 / params_.temperature;
  // Candidates in id order with weight exp((x - max) / T); weights below e^-80 (relative to the
  // best token's 1) are dropped: they cannot be drawn in double precision sums anyway.
  // With top-k, only the best k are kept while scanning: once more than k qualify, c is a heap
  // whose front is the lowest-ranked kept candidate (one comparison per token, no 150k-entry
  // vector), sorted by rank at the end - the same set and order as sorting every candidate.
  Ranked rank;
  const size_t k = params_.top_k > 0 && params_.top_k < vocab_ ? static_cast<size_t>(params_.top_k) : 0;
  // Written through a pointer into c sized for the worst case (grown once, never shrunk):
  // push_back per token was a call per token on a 150k vocabulary.
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
  if (sorted) std::sort_heap(out, out + n, rank);
  // Weights; the best token has weight 1. Single-precision exp (relative error ~1e-7, far below
  // anything a draw can resolve) is twice as fast as double on a 150k vocabulary.
  if (k != 0)
    for (size_t i = 0; i < n; ++i) out[i].second = static_cast<double>(std::exp(static_cast<float>(out[i].second)));
  if (params_.top_p < 1.0) {
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += out[i].second;
    const double need = params_.top_p * total;
    if (sorted) {
      double cum = 0;
      size_t keep = 0;
      while (keep < n && cum < need) cum += out[keep++].second;
      n = keep;
    } else {
      // The nucleus without sorting the vocabulary: find the last token it takes by selection,
      // then keep every candidate ranked at or above it, still in id order.
      const Candidate last = nucleus_last(out, n, need, mass_, select_);
      n = static_cast<size_t>(std::remove_if(out, out + n, [&](const auto& e) { return rank(last, e); }) - out);
    }
  }
  if (params_.min_p > 0) {
    // Relative to the most likely token, whose weight is 1 after the shift above.
    const double cut = params_.min_p;
    n = static_cast<size_t>(std::remove_if(out, out + n, [cut](const auto& e) { return e.second < cut; }) - out);
  }
  // Draw order: by rank after top-k, by id otherwise; both fixed for given logits.
  return n;
}

std::vector<float> Sampler::distribution(const float* logits) const {
  std::vector<float> x(logits, logits + vocab_);
  process(x.data());
  std::vector<Candidate> c;
  const size_t n = candidates(x.data(), c);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += c[i].second;
  std::vector<float> p(static_cast<size_t>(vocab_), 0.f);
  for (size_t i = 0; i < n; ++i) p[static_cast<size_t>(c[i].first)] = static_cast<float>(c[i].second / total);
  return p;
}

SampleResult Sampler::sample(const float* logits) {
  std::vector<float>& x = work_;  // reused: no allocation per token
  x.assign(logits, logits + vocab_);
  process(x.data());
  std::vector<Candidate>& c = cand_;
  const size_t n = candidates(x.data(), c);

  SampleResult r;
  if (n == 1) {
    r.token = c[0].first;
  } else {
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += c[i].second;
    const double u = rng_.uniform() * total;
    double cum = 0;
    r.token = c[n - 1].first;  // u * total rounded up to total: the last candidate
    for (size_t i = 0; i < n; ++i) {
      cum += c[i].second;
      if (u < cum) { r.token = c[i].first; break; }
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

bool Sampler::plain_greedy() const {
  const SamplingParams& p = params_;
  return p.temperature == 0.0 && p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 &&
         p.logit_bias.empty() && !p.logprobs && p.top_logprobs == 0;
}

}  // namespace mlxb
