// Recorded batched decode steps (CUDA graphs) for the engine's paged forward (decoder_rows.h).
// A step where every row decodes one token is padded to a row bucket R and a block-table width
// W (rows_bucket / width_bucket) and recorded once per (R, W, pool, rope, mode) key; later steps
// with that key rewrite one i32 device buffer (ids, positions, KV slots, key counts, block
// tables) and replay the graph: one launch instead of ~20 per layer. Padding rows decode token 0
// at position 0, write no KV (slot -1, which the CUDA rope_kv_write / kv_write skip; the CPU
// kv_write rejects it, and this path is CUDA only) and read one key of block 0; their outputs
// are dropped.
// A key is recorded on its second use (the first runs eagerly, which loads kernels and GEMM
// plans outside any capture); a failed capture turns recording off for the model (eager from
// then on; MLXB_GRAPH_DEBUG=1 prints why).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ops/ops.h"

namespace mlxb {

class RowGraphs {
 public:
  // Device views of a step's integers (one buffer; see layout()).
  struct Inputs {
    Tensor ids, pos, slots, sel, q_offset, q_count, kv_len, table;  // table: [R, W]
  };
  // What a step leaves on the device: logits [R, vocab] (activation dtype) and their argmax [R].
  struct Outputs {
    Tensor logits, next;
  };
  using Body = std::function<Outputs(const Inputs&)>;

  explicit RowGraphs(Device device);
  ~RowGraphs();

  static int64_t rows_bucket(int64_t rows);
  static int64_t width_bucket(int64_t blocks);
  // Host buffer of R rows and width W: ids, pos, slots, sel, q_offset, q_count, kv_len ([R]
  // each), then the table [R * W]. Offsets of each section in elements.
  enum Section { kIds = 0, kPos, kSlots, kSel, kQOffset, kQCount, kKvLen, kTable };
  static int64_t offset(Section s, int64_t rows) { return static_cast<int64_t>(s) * rows; }
  static int64_t size(int64_t rows, int64_t width) { return kTable * rows + rows * width; }
  static Inputs views(const Tensor& buf, int64_t rows, int64_t width);

  // Replays (recording first when due) the step of `key` with inputs `host`; nullptr: not
  // recorded (first use of the key, or recording is off): run `body` eagerly instead.
  // `fed_rows` > 0: the first fed_rows ids are then taken from the device ids the last pass_on
  // kept (the engine's pipelined steps), not from `host`.
  const Outputs* run(const std::vector<uint64_t>& key, int64_t rows, int64_t width, const std::vector<int32_t>& host,
                     const Body& body, int64_t fed_rows = 0);
  // Whether `key` has a recorded step (run would replay it).
  bool recorded(const std::vector<uint64_t>& key);
  // After a replay: keeps the first `n` ids of `next` on the device for the next run's fed rows
  // and queues their read to the host (Backend::read_later; the ticket is returned).
  int64_t pass_on(const Tensor& next, int64_t n);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

 private:
  struct Entry;
  Device device_;
  std::vector<std::unique_ptr<Entry>> entries_;  // least recently used first
  std::vector<std::vector<uint64_t>> seen_;      // keys used once (recorded at their second use)
  Tensor fed_;  // pass_on's ids (Backend::kReadBytes of int32)
  bool disabled_ = false;
  int64_t captures_ = 0, replays_ = 0;
};

// Whether batched decode steps are recorded: on unless MLXB_CUDA_GRAPH=0 or MLXB_ROWS_GRAPH=0.
bool row_graphs_enabled();

}  // namespace mlxb
