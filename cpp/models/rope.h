// Rotary-embedding frequencies: RopeConfig (already read from any config dialect) -> inv_freq and
// the cos/sin multiplier, computed the way transformers 5 computes them (modeling_rope_utils):
// default, linear, dynamic NTK (depends on the sequence length of the call), llama3, YaRN, and
// partial rotary (rot_dim = int(head_dim * partial_rotary_factor)). The rope op only rotates.
#pragma once
#include <cstdint>
#include <vector>

#include "io/config.h"
#include "ops/ops.h"

namespace mlxb {

struct RopeFreqs {
  std::vector<float> inv_freq;  // rot_dim / 2 entries
  float mscale = 1.0f;          // "attention_scaling" of transformers
  int64_t rot_dim = 0;
};

// inv_freq for a forward whose highest position is seq_len - 1. Only dynamic NTK reads seq_len
// (and max_position_embeddings); every other type ignores it.
RopeFreqs rope_freqs(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings, int64_t seq_len);

// The frequencies of one rope config on a device, ready for ops::rope. Static types are computed
// once; dynamic NTK recomputes per call when the sequence outgrows max_position_embeddings.
class RopeTable {
 public:
  RopeTable(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings, Device device);
  // Args for a forward whose highest position is seq_len - 1. Thread-safe (no shared mutation).
  RopeArgs args(int64_t seq_len) const;
  int64_t rot_dim() const { return base_.rot_dim; }
  // True when args(seq_len) returns the load-time frequencies (every type but dynamic NTK past
  // max_position_embeddings): a recorded step may then keep using them.
  bool fixed(int64_t seq_len) const { return rope_.type != RopeType::kDynamic || seq_len <= max_pos_; }

 private:
  RopeConfig rope_;
  int64_t head_dim_, max_pos_;
  Device device_;
  RopeFreqs base_;
  Tensor base_dev_;
};

}  // namespace mlxb
