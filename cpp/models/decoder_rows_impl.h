// Internal to the batched forward (decoder_rows.cc, decoder_paged.cc): the flattened rows of a
// step and the layer loop both entry points share. Not an API.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "models/decoder_rows.h"

namespace mlxb::batched {

// Rows of a CUDA linear in batch-invariant mode: the GEMV kernel's limit (cuda/matmul.cu), whose
// per-row reduction order does not depend on M.
constexpr int64_t kInvariantRows = 8;
// On CUDA (fast mode), rows with more query tokens than this gather their keys and use the
// flash kernel; shorter rows share one paged_attention launch.
constexpr int64_t kPagedMaxQuery = 16;

// One step's rows, flattened: token k of row r is activation row offset[r] + k.
struct Batch {
  int64_t total = 0;
  std::vector<int64_t> offset, count, start;
  std::vector<int32_t> ids, pos;  // host, [total]
  Tensor ids_dev, pos_dev;        // on the model's device
  bool shared_rope = true;        // every row uses the same frequencies (all but dynamic NTK)
  std::vector<RopeArgs> full, local;  // per row (all equal when shared_rope)
};

// Checks one row's token ids and start position (typed kInvalidArgument).
void check_row(const DecoderParts& d, const int32_t* ids, int64_t t, int64_t start);
// Fills positions and rope arguments; ids/pos_dev are uploaded by the caller (with its other
// per-step integers when it has some).
void plan_rows(const DecoderParts& d, Batch& b);
// An owned device (or CPU) copy of host integers.
Tensor upload_i32(const std::vector<int32_t>& v, Device device);

// How run_layers computes a step (the CUDA paged paths; the defaults are the plain ops).
struct LayerPlan {
  // The attention callback rotates q and k itself (rope_kv_write); needs shared rope arguments.
  bool attend_ropes = false;
  // One q/k/v projection (q, k, v are row-strided column views of it; needs attend_ropes, no
  // q/k norms, and an attention that takes strided q) and one gate/up projection + activation.
  bool fuse = false;
  // The folded layers (DecoderParts::folded; models/fold_norms.h) instead: needs fuse and an
  // attention callback that applies a RowScale.
  bool fold = false;
};

// q3/k3/v3 of a folded layer are projections of the residual rows x [T, H] themselves: the
// attention callback scales row t by 1 / sqrt(mean(x[t]^2) + eps) (ops::rms_scaled_rope_kv_write).
struct RowScale {
  const Tensor* x = nullptr;
  float eps = 0.0f;
};

// Attention of one layer for all rows: q3 [T, Hq, D], k3/v3 [T, Hkv, D] -> o3. `rope` non-null:
// q3/k3 are not rotated yet and the callback applies it (else they were rotated already).
// `scale` non-null (plan.fold, always with rope): as RowScale says.
using AttentionFn = std::function<void(int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3,
                                       Tensor& o3, const RopeArgs* rope, const RowScale* scale)>;

// Embedding, every layer, and the final norm + LM head of the activation rows `sel` (host
// indices). Returns logits [sel.size(), vocab] in the activation dtype on the model's device.
Tensor run_layers(const DecoderParts& d, const Batch& b, const Tensor& sel_dev, int64_t n_sel, const AttentionFn& attend,
                  const LayerPlan& plan = LayerPlan());

// Copies rows of device logits [n, vocab] (activation dtype) as f32 to host destinations (null: skipped).
void copy_logits(const DecoderParts& d, const Tensor& out, const std::vector<float*>& dst);

}  // namespace mlxb::batched
