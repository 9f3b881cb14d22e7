// Shared building blocks of the decoder graphs: attention (q/k/v/o projections, optional q/k
// RMSNorm, rotary embedding, cache update, scaled-dot-product attention) and the gated MLP.
// Device-agnostic: activations are allocated on the model's device in the activation dtype and
// only ops:: touch them.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/cache.h"
#include "models/rope.h"
#include "models/weights.h"

namespace mlxb {

// Device-resident inputs of a captured decode step (models/decode_graph.h): views into one
// buffer the host rewrites before each replay, so the recorded kernels read them at run time.
struct CapturedStep {
  Tensor slot, ring_slot;  // i32 [1]: cache slot of this token (contiguous / ring caches)
  Tensor len, ring_len;    // i32 [1]: slots that may hold visible keys (AttentionArgs::kv_len)
  Tensor ring_pos;         // i32 [ring capacity]: position held by each ring slot, this token's included
};

// What one forward call shares across layers: the token positions on host and device.
struct StepInputs {
  int64_t t = 0;                 // tokens in this call
  std::vector<int32_t> pos;      // host positions (start .. start+t-1)
  Tensor pos_dev;                // i32 [t] on the model's device
  DType act = DType::F32;        // activation dtype
  Device device = Device::kCPU;
  RopeArgs rope_full, rope_local; // frequencies for this call (dynamic NTK depends on its length)
  const CapturedStep* captured = nullptr;  // set while a decode step is being recorded: caches are
                                           // written through device_layout(), not update()
};

struct AttentionWeights {
  Linear q, k, v, o;
  Linear qkv;             // [q; k; v] rows in one weight when fused at load (q/k/v are then views of it)
  Tensor q_norm, k_norm;  // [head_dim] when the family normalises q/k per head
};

struct AttentionParams {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float norm_eps = 1e-6f;
  bool norm_add_one = false;   // Gemma's (1 + w) RMSNorm for q/k norms
  AttentionArgs args;          // scale, soft-cap, window
  bool local_rope = false;     // sliding layers with their own rope (Gemma 3)
};

// out [t, hidden] = attention over x [t, hidden] (normalised input), appending k/v to `cache`.
void attention_block(const Tensor& x, const AttentionWeights& w, const AttentionParams& p, LayerCache& cache,
                     const StepInputs& step, Tensor& out);

// The attention of one-token (or eager) steps after the projections: q3 [t, H, D], k3 / v3
// [t, Hkv, D] (views of one fused row are fine; qk, when defined, the q and k heads as one view
// for a single rope launch). A recorded step (step.captured) rotates q/k and writes k/v into the
// cache buffers at its slot in one launch; otherwise rope, cache.update() and attention. o gets
// [t, H, D].
void attend(Tensor& q3, Tensor& k3, const Tensor& v3, Tensor qk, const RopeArgs& rope, const AttentionParams& p,
            LayerCache& cache, const StepInputs& step, Tensor& o);

struct MlpWeights {
  Linear gate, up, down;
  Linear gate_up;  // [gate; up] rows in one weight when fused at load (gate/up are then views of it)
};

// Fuses q/k/v and gate/up of a layer into one weight each when they are dense, share a dtype and
// either all or none has a bias (already adjacent views, as Phi-3's, are joined without a copy).
// The parts become row views of the fused weight. Quantized layers fuse when bits, group size,
// scale dtype and bias presence agree (fuse_quant.h); mixed dense/quantized layers are left alone.
void fuse_projections(AttentionWeights& attn, MlpWeights& mlp);

// out [t, hidden] = down(act(gate(x)) * up(x))
void mlp_block(const Tensor& x, const MlpWeights& w, Activation act, const StepInputs& step, Tensor& out);

}  // namespace mlxb
