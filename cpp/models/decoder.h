// The decoder-only transformer every supported family is an instance of: token embedding
// (optionally scaled), N layers of [norm -> attention -> (norm) -> residual, norm -> MLP -> (norm)
// -> residual], final norm, LM head (tied or not), optional final soft-cap. A family file fills
// a DecoderSpec (what differs) and, when its tensor names differ from the Llama layout, its own
// layer loader; everything else is shared here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/model.h"
#include "models/weights.h"

namespace mlxb {

struct LayerWeights {
  Tensor input_norm;       // before attention
  Tensor post_attn_norm;   // Llama: before the MLP. Sandwich (Gemma 2/3): after attention
  Tensor pre_ff_norm;      // sandwich only: before the MLP
  Tensor post_ff_norm;     // sandwich only: after the MLP
  AttentionWeights attn;
  MlpWeights mlp;
};

struct DecoderSpec;
using LayerLoader = void (*)(WeightLoader& wl, const DecoderSpec& spec, int64_t layer, LayerWeights& out);

struct DecoderSpec {
  bool norm_add_one = false;      // RMSNorm scales by (1 + w) (Gemma)
  bool scale_embeddings = false;  // embeddings times sqrt(hidden) (Gemma)
  bool qkv_bias = false;          // biases on q/k/v projections
  bool o_bias = false;            // bias on the output projection
  bool mlp_bias = false;          // biases on gate/up/down
  bool qk_norm = false;           // per-head RMSNorm of q and k before rope (Qwen 3, Gemma 3)
  bool sandwich_norms = false;    // Gemma 2/3 pre/post norms around attention and MLP
  float attn_scale = 0.0f;        // 0: head_dim^-0.5
  float attn_softcap = 0.0f;      // 0: none
  float final_softcap = 0.0f;     // 0: none
  LayerLoader load_layer = nullptr;  // nullptr: the Llama tensor layout (load_llama_layer)
  GraphCapabilities caps;
};

// Llama layout: model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, [self_attn.{q,k}_norm],
// post_attention_layernorm, [pre_feedforward_layernorm, post_feedforward_layernorm],
// mlp.{gate,up,down}_proj}.
void load_llama_layer(WeightLoader& wl, const DecoderSpec& spec, int64_t layer, LayerWeights& out);
std::string layer_prefix(int64_t layer);  // "model.layers.N."

std::unique_ptr<Model> build_decoder(const ModelConfig& cfg, DecoderSpec spec, const WeightStore& store,
                                     const LoadOptions& options);

// The activation dtype of a device for a weight-dtype choice (f32 on the CPU).
DType activation_dtype(Device device, const LoadOptions& options);

}  // namespace mlxb
