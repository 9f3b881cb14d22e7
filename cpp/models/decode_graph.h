// One-token decode steps replayed from a recorded device graph (CUDA graphs), so that a step
// costs one graph launch on the host instead of a few hundred kernel launches. A step is
// recorded once per cache layout (the addresses and capacities of every layer's buffers, which
// device_layout() keeps fixed while the caches grow geometrically) and replayed while that
// layout holds. Everything that changes from step to step (token id, position, cache slot, key
// count, ring slot positions) lives in one small device buffer that the host rewrites before
// each replay; the recorded kernels read it at run time. Steps the graph does not cover (caches
// without device layouts, dynamic rope past its base length, a failed capture) return false and
// the caller runs them eagerly.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "models/blocks.h"

namespace mlxb {

class DecodeGraphs {
 public:
  // What a recorded step leaves on the device: float32 logits [1, vocab] and their argmax i32 [1].
  // `next` may be ids_dev itself (the step's own token slot): then greedy steps can chain.
  struct Outputs {
    Tensor logits, next;
  };
  // Queues the decoder's work for one token: ids_dev i32 [1]; step.captured is set.
  using Body = std::function<Outputs(const Tensor& ids_dev, const StepInputs& step)>;
  // The `base` of run() for a step at position `start`; false: no recorded step can run there.
  using BaseAt = std::function<bool(int64_t start, StepInputs& base)>;

  explicit DecodeGraphs(Device device);
  ~DecodeGraphs();

  // One decode step of token `id` at position caches.length(). `base` carries t = 1, the
  // activation dtype and the rope arguments. Writes the logits and/or the argmax when non-null.
  // Commits the token to the caches on success; false: nothing was run, run the step eagerly.
  bool run(int32_t id, CacheSet& caches, const StepInputs& base, const Body& body, float* logits, int32_t* next);

  // Up to n greedy steps after token `id`, chained on the device: each replay takes its token
  // from the argmax the previous one left in the same graph's token slot, so the host queues
  // step i + 1 before it waits for token i and the device never idles between steps. Writes
  // tokens[0 .. done) and returns done; it stops early (nothing queued left over) where run()
  // would return false, and chains only within one recorded layout (a new layout starts from
  // the host's copy of the last token). MLXB_GREEDY_CHAIN=0 turns chaining off (returns 0).
  int64_t chain(int32_t id, int64_t n, CacheSet& caches, const BaseAt& base_at, const Body& body, int32_t* tokens);

  int64_t captures() const { return captures_; }
  // The device outputs of the last successful run() (valid until the next one).
  const Outputs* last() const { return last_; }

 private:
  struct Entry;
  struct Layout;
  Entry* capture(std::vector<const void*> key, int64_t ring_cap, const StepInputs& base, const Body& body);
  bool layout(CacheSet& caches, Layout& out) const;
  // Writes the host inputs of a step at the caches' length and queues their upload (all of
  // them, or all but the token id when `keep_id`), the replay and the caches' commit.
  void launch(Entry* e, const Layout& lay, CacheSet& caches, int32_t id, bool keep_id);

  Device device_;
  std::vector<std::unique_ptr<Entry>> entries_;  // least recently used first
  bool disabled_ = false;
  int64_t captures_ = 0;
  const Outputs* last_ = nullptr;
};

// Whether decode graphs are wanted: on unless MLXB_CUDA_GRAPH=0 (read when a model loads).
bool decode_graphs_enabled();

}  // namespace mlxb
