// Recorded decode steps (see decode_graph.h).
#include "models/decode_graph.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "models/graph_cache.h"

namespace mlxb {

namespace {
// Layout of the per-step input buffer (i32): token id, position (= contiguous slot), ring slot,
// visible slots of contiguous caches, of ring caches, then the ring's slot positions.
constexpr int64_t kId = 0, kPos = 1, kRingSlot = 2, kLen = 3, kRingLen = 4, kHeader = 8;
constexpr size_t kMaxEntries = 4;
}  // namespace

bool decode_graphs_enabled() {
  const char* v = std::getenv("MLXB_CUDA_GRAPH");
  return !(v && std::strcmp(v, "0") == 0);
}

struct DecodeGraphs::Entry {
  std::vector<const void*> key;
  int64_t ring_cap = 0;
  std::vector<int32_t> host;  // staged inputs
  Tensor in_dev;              // i32 [kHeader + ring_cap], outside the graph's arena
  std::unique_ptr<DeviceGraph> graph;
  Outputs out;                // arena memory: declared last so it is released before the graph
};

DecodeGraphs::DecodeGraphs(Device device) : device_(device) {}
DecodeGraphs::~DecodeGraphs() = default;

DecodeGraphs::Entry* DecodeGraphs::capture(std::vector<const void*> key, int64_t ring_cap, const StepInputs& base,
                                           const Body& body) {
  auto e = std::make_unique<Entry>();
  e->key = std::move(key);
  e->ring_cap = ring_cap;
  e->host.assign(static_cast<size_t>(kHeader + ring_cap), 0);
  e->in_dev = Tensor::zeros({kHeader + ring_cap}, DType::I32, device_);
  auto view = [&](int64_t at, int64_t n) { return e->in_dev.slice_rows(at, at + n); };
  CapturedStep cs;
  cs.slot = view(kPos, 1);
  cs.ring_slot = view(kRingSlot, 1);
  cs.len = view(kLen, 1);
  cs.ring_len = view(kRingLen, 1);
  if (ring_cap > 0) cs.ring_pos = view(kHeader, ring_cap);
  StepInputs step = base;
  step.pos_dev = view(kPos, 1);
  step.captured = &cs;
  e->graph = record_graph(backend(device_), "decode graph", disabled_, e->out, [&] { return body(view(kId, 1), step); });
  if (!e->graph) return nullptr;
  ++captures_;
  return add_recent(entries_, std::move(e), kMaxEntries);
}

struct DecodeGraphs::Layout {
  std::vector<const void*> key;
  int64_t ring_cap = 0;
  const int32_t* ring_host = nullptr;
};

bool DecodeGraphs::layout(CacheSet& caches, Layout& out) const {
  if (disabled_ || caches.empty()) return false;
  out.key.clear();
  out.key.reserve(caches.size() * 4);
  out.ring_cap = 0;
  out.ring_host = nullptr;
  LayerCache::DeviceLayout lay;
  for (auto& c : caches) {
    if (!c->device_layout(1, lay)) return false;
    if (lay.ring) {
      if (out.ring_cap != 0 && out.ring_cap != lay.capacity) return false;  // one ring geometry per model
      out.ring_cap = lay.capacity;
      out.ring_host = lay.host_pos;
    }
    out.key.push_back(lay.k.data());
    out.key.push_back(lay.v.data());
    out.key.push_back(lay.pos.defined() ? lay.pos.data() : nullptr);
    out.key.push_back(reinterpret_cast<const void*>(static_cast<intptr_t>(lay.capacity * 2 + (lay.ring ? 1 : 0))));
  }
  return caches[0]->length() + 1 <= INT32_MAX;
}

void DecodeGraphs::launch(Entry* e, const Layout& lay, CacheSet& caches, int32_t id, bool keep_id) {
  const int64_t pos = caches[0]->length();
  std::vector<int32_t>& in = e->host;
  const int32_t p32 = static_cast<int32_t>(pos);
  in[kId] = id;
  in[kPos] = p32;
  in[kLen] = p32 + 1;
  if (lay.ring_cap > 0) {
    const int64_t slot = pos % lay.ring_cap;
    in[kRingSlot] = static_cast<int32_t>(slot);
    in[kRingLen] = static_cast<int32_t>(std::min<int64_t>(pos + 1, lay.ring_cap));
    std::memcpy(in.data() + kHeader, lay.ring_host, static_cast<size_t>(lay.ring_cap) * sizeof(int32_t));
    in[static_cast<size_t>(kHeader + slot)] = p32;
  }
  const int64_t from = keep_id ? kId + 1 : kId;
  backend(device_).copy(static_cast<int32_t*>(e->in_dev.data()) + from, device_, in.data() + from, Device::kCPU,
                        static_cast<int64_t>(in.size() - static_cast<size_t>(from)) * static_cast<int64_t>(sizeof(int32_t)));
  e->graph->launch();
  last_ = &e->out;
  for (auto& c : caches) c->commit(&p32, 1);
}

bool DecodeGraphs::run(int32_t id, CacheSet& caches, const StepInputs& base, const Body& body, float* logits, int32_t* next) {
  Layout lay;
  if (!layout(caches, lay)) return false;
  Entry* e = find_recent(entries_, lay.key);
  if (!e) e = capture(lay.key, lay.ring_cap, base, body);
  if (!e) return false;
  launch(e, lay, caches, id, false);
  Backend& be = backend(device_);
  if (logits) be.copy(logits, Device::kCPU, e->out.logits.data(), device_, e->out.logits.nbytes());
  if (next) be.copy(next, Device::kCPU, e->out.next.data(), device_, sizeof(int32_t));
  return true;
}

int64_t DecodeGraphs::chain(int32_t id, int64_t n, CacheSet& caches, const BaseAt& base_at, const Body& body, int32_t* tokens) {
  static const bool on = [] {
    const char* v = std::getenv("MLXB_GREEDY_CHAIN");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  if (!on) return 0;
  Backend& be = backend(device_);
  int64_t queued = 0;   // steps launched; all but the last have their token in `tokens`
  int64_t ticket = -1;  // the read of the last launched step's token, while it is pending
  Entry* prev = nullptr;
  auto settle = [&] {
    if (ticket < 0) return;
    be.read_wait(ticket, &tokens[queued - 1]);
    ticket = -1;
  };
  Layout lay;
  StepInputs base;
  try {
    while (queued < n) {
      if (!base_at(caches[0]->length(), base) || !layout(caches, lay)) break;
      Entry* e = find_recent(entries_, lay.key);
      if (!e) {
        settle();  // recording may drop an entry a pending step still runs
        e = capture(lay.key, lay.ring_cap, base, body);
        if (!e) break;
      }
      if (e->out.next.data() != e->in_dev.data()) break;  // this body leaves its argmax elsewhere
      const bool chained = e == prev && ticket >= 0;
      if (!chained) settle();
      launch(e, lay, caches, chained ? 0 : (queued == 0 ? id : tokens[queued - 1]), chained);
      const int64_t read = be.read_later(e->out.next.data(), sizeof(int32_t));
      settle();
      ticket = read;
      prev = e;
      ++queued;
    }
    settle();
  } catch (...) {
    // A step that is queued still ends on the device; wait so no read is left behind.
    try {
      be.synchronize();
    } catch (...) {
    }
    throw;
  }
  return queued;
}

}  // namespace mlxb
