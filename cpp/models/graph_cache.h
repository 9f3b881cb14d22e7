// The bookkeeping shared by the two caches of recorded steps (decode_graph.cc for one-token
// decode, rows_graph.cc for batched decode): recording a step into a device graph, and a short
// list of recorded entries kept in least-recently-used order. Not here: what a step's key is and
// which inputs it reads, which is where the two differ.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

#include "ops/ops.h"

namespace mlxb {

// Records the work `body` queues on `be` (body returns the step's outputs, stored in `out`) and
// returns the graph. nullptr when the backend cannot record, or when the recording failed: then
// `out` is released, `disabled` is set (the model runs its steps eagerly from now on) and
// MLXB_GRAPH_DEBUG=1 prints why, naming `what`.
template <typename Outputs, typename Body>
std::unique_ptr<DeviceGraph> record_graph(Backend& be, const char* what, bool& disabled, Outputs& out, Body&& body) {
  if (!be.begin_capture()) {
    disabled = true;
    return nullptr;
  }
  try {
    out = body();
    return be.end_capture();
  } catch (const std::exception& ex) {
    be.abort_capture();
    out = Outputs();
    disabled = true;
    if (std::getenv("MLXB_GRAPH_DEBUG")) std::fprintf(stderr, "mlxb: %s capture failed: %s\n", what, ex.what());
    return nullptr;
  }
}

// The entry whose `key` equals `key`, moved to the back (most recently used); nullptr if none.
template <typename Entry, typename Key>
Entry* find_recent(std::vector<std::unique_ptr<Entry>>& entries, const Key& key) {
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i]->key == key) {
      std::unique_ptr<Entry> hit = std::move(entries[i]);
      entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(i));
      entries.push_back(std::move(hit));
      return entries.back().get();
    }
  }
  return nullptr;
}

// Appends `e` as the most recently used entry, first dropping the least recently used one when
// `max_entries` are held.
template <typename Entry>
Entry* add_recent(std::vector<std::unique_ptr<Entry>>& entries, std::unique_ptr<Entry> e, size_t max_entries) {
  if (entries.size() >= max_entries) entries.erase(entries.begin());
  entries.push_back(std::move(e));
  return entries.back().get();
}

}  // namespace mlxb
