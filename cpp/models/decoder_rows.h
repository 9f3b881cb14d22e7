// The batched forward of the shared decoder (decoder.h): several independent sequences in one
// pass. Every row's tokens are concatenated into one [sum_t, hidden] activation, so each linear,
// norm and MLP op runs once per step (one GEMM instead of one GEMV per row); rope uses each
// token's own position; attention runs per row over that row's cache. Only the last token of a
// row that asks for logits goes through the LM head.
//
// Two entry points: forward_rows over any LayerCache (per-row cache update + attention), and
// forward_paged (decoder_paged.cc) over the engine's paged pool (one kv_write per layer for all rows, one
// paged_attention launch for the decode rows; on CUDA prefill rows gather their keys once and use
// the flash kernel). Batch invariance: on the CPU every row's logits are bit for bit those it
// gets alone (the CPU matmul's per-row reduction order does not depend on M, attention is per
// row); on CUDA only with `batch_invariant` (linears in slices of at most 8 rows, which always
// take the M-independent GEMV kernel, and every row through paged_attention).
// On CUDA a step where every row decodes one token is padded to a row bucket and replayed from a
// recorded graph (rows_graph.h); q/k/v and gate/up run as one projection each there and in
// every step whose rows all go through paged_attention.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/paged.h"
#include "models/decoder.h"
#include "models/fold_norms.h"

namespace mlxb {

class RowGraphs;

// What the batched forward reads of a built decoder (references into it).
struct DecoderParts {
  const ModelConfig* cfg = nullptr;
  const DecoderSpec* spec = nullptr;
  Device device = Device::kCPU;
  DType act = DType::F32;
  const Linear* embed = nullptr;
  const Linear* lm_head = nullptr;
  const std::vector<LayerWeights>* layers = nullptr;
  const Tensor* final_norm = nullptr;
  const RopeTable* rope_global = nullptr;
  const RopeTable* rope_local = nullptr;  // may be null
  const std::vector<AttentionParams>* attn = nullptr;
  float embed_scale = 1.0f;
  bool batch_invariant = false;
  RowGraphs* row_graphs = nullptr;  // the model's recorded decode steps (CUDA); null: always eager
  const std::vector<FoldedLayer>* folded = nullptr;  // folded norms (fold_norms.h); null: none
};

void decoder_forward_rows(const DecoderParts& d, const std::vector<Model::Row>& rows);
void decoder_forward_paged(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows);
// Model::forward_paged_queue / forward_paged_collect: only recorded decode steps (CUDA) queue.
int64_t decoder_paged_queue(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows, bool fed);
void decoder_paged_collect(Device device, int64_t ticket, int32_t* argmax, int64_t n);

}  // namespace mlxb
