// Rotary frequencies as transformers 5.17 computes them (see rope.h). Powers and divisions are
// done in float32 where torch does them on float32 tensors, so inv_freq matches to the last bit
// or two; the scalar bookkeeping (correction ranges, llama3 wavelength bands) is in double as in
// Python.
#include "models/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace mlxb {

namespace {

constexpr double kPi = 3.14159265358979323846;

int64_t rotary_dim(const RopeConfig& r, int64_t head_dim) {
  const int64_t d = static_cast<int64_t>(static_cast<double>(head_dim) * r.partial_rotary_factor);
  if (d < 2 || d % 2 != 0 || d > head_dim)
    fail(ErrorCode::kInvalidConfig, "rotary dimension " + std::to_string(d) + " (head_dim " + std::to_string(head_dim) +
                                        " x partial_rotary_factor) must be even and in [2, head_dim]",
         "partial_rotary_factor");
  return d;
}

// 1 / base^(2i/dim) in float32: torch evaluates `base ** (arange(0, dim, 2).float() / dim)`.
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(base), e);
  }
  return f;
}

void llama3(const RopeConfig& r, std::vector<float>& f) {
  const double old_ctx = static_cast<double>(r.original_max_position);
  // torch compares the float32 wavelengths with the Python bounds cast to float32
  const float low_wavelen = static_cast<float>(old_ctx / r.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_ctx / r.high_freq_factor);
  for (float& x : f) {
    const float wavelen = static_cast<float>(2 * kPi) / x;
    if (wavelen > low_wavelen) {
      x = x / static_cast<float>(r.factor);
    } else if (!(wavelen < high_wavelen)) {
      const float smooth = (static_cast<float>(old_ctx) / wavelen - static_cast<float>(r.low_freq_factor)) /
                           static_cast<float>(r.high_freq_factor - r.low_freq_factor);
      x = (1.0f - smooth) * x / static_cast<float>(r.factor) + smooth * x;
    }
  }
}

double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

float yarn(const RopeConfig& r, int64_t dim, int64_t max_pos, std::vector<float>& f) {
  const double factor = r.factor;
  const double orig = static_cast<double>(r.original_max_position > 0 ? r.original_max_position : max_pos);
  double attn;
  if (r.attention_factor) {
    attn = *r.attention_factor;
  } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0.0 && *r.mscale_all_dim != 0.0) {
    attn = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
  } else {
    attn = yarn_mscale(factor, 1.0);
  }
  auto corr = [&](double rot) { return (dim * std::log(orig / (rot * 2 * kPi))) / (2 * std::log(r.theta)); };
  double low = corr(r.beta_fast), high = corr(r.beta_slow);
  if (r.truncate) { low = std::floor(low); high = std::ceil(high); }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pos_freq = std::pow(static_cast<float>(r.theta), e);
    const float extra = 1.0f / pos_freq, inter = 1.0f / (static_cast<float>(factor) * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float ext_factor = 1.0f - ramp;
    f[static_cast<size_t>(i)] = inter * (1.0f - ext_factor) + extra * ext_factor;
  }
  return static_cast<float>(attn);
}

}  // namespace

RopeFreqs rope_freqs(const RopeConfig& r, int64_t head_dim, int64_t max_pos, int64_t seq_len) {
  RopeFreqs out;
  out.rot_dim = rotary_dim(r, head_dim);
  const int64_t dim = out.rot_dim;
  if ((r.type != RopeType::kDefault) && !(r.factor > 0.0))
    fail(ErrorCode::kInvalidConfig, "rope scaling factor must be > 0", "rope_scaling.factor");
  switch (r.type) {
    case RopeType::kDefault:
      out.inv_freq = default_inv_freq(r.theta, dim);
      break;
    case RopeType::kLinear:
      out.inv_freq = default_inv_freq(r.theta, dim);
      for (float& x : out.inv_freq) x /= static_cast<float>(r.factor);
      break;
    case RopeType::kDynamic: {
      // base * ((factor * L / max_pos) - (factor - 1)) ** (dim / (dim - 2)), L = max(seq_len, max_pos)
      const double len = static_cast<double>(std::max(seq_len, max_pos));
      const double base = r.theta * std::pow(r.factor * len / static_cast<double>(max_pos) - (r.factor - 1.0),
                                             static_cast<double>(dim) / static_cast<double>(dim - 2));
      out.inv_freq = default_inv_freq(base, dim);
      break;
    }
    case RopeType::kLlama3:
      if (r.original_max_position <= 0)
        fail(ErrorCode::kInvalidConfig, "llama3 rope needs original_max_position_embeddings", "original_max_position_embeddings");
      out.inv_freq = default_inv_freq(r.theta, dim);
      llama3(r, out.inv_freq);
      break;
    case RopeType::kYarn:
      out.inv_freq.resize(static_cast<size_t>(dim / 2));
      out.mscale = yarn(r, dim, max_pos, out.inv_freq);
      break;
  }
  return out;
}

namespace {
Tensor to_device(const std::vector<float>& v, Device device) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())}, DType::F32, Device::kCPU);
  std::copy(v.begin(), v.end(), host.ptr<float>());
  return device == Device::kCPU ? host : host.to(device);
}
}  // namespace

RopeTable::RopeTable(const RopeConfig& rope, int64_t head_dim, int64_t max_pos, Device device)
    : rope_(rope), head_dim_(head_dim), max_pos_(max_pos), device_(device) {
  if (max_pos_ <= 0) fail(ErrorCode::kInvalidConfig, "max_position_embeddings must be > 0", "max_position_embeddings");
  base_ = rope_freqs(rope_, head_dim_, max_pos_, 0);
  base_dev_ = to_device(base_.inv_freq, device_);
}

RopeArgs RopeTable::args(int64_t seq_len) const {
  RopeArgs a;
  a.rot_dim = base_.rot_dim;
  a.mscale = base_.mscale;
  a.interleaved = false;
  if (rope_.type == RopeType::kDynamic && seq_len > max_pos_) {
    RopeFreqs f = rope_freqs(rope_, head_dim_, max_pos_, seq_len);
    a.inv_freq = to_device(f.inv_freq, device_);
  } else {
    a.inv_freq = base_dev_;
  }
  return a;
}

}  // namespace mlxb
