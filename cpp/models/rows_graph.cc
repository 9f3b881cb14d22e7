// Recorded batched decode steps (see rows_graph.h).
#include "models/rows_graph.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "models/graph_cache.h"

namespace mlxb {

namespace {
constexpr size_t kMaxEntries = 8;  // recorded steps kept per model (each holds its activations)
constexpr size_t kMaxSeen = 32;
}  // namespace

bool row_graphs_enabled() {
  for (const char* name : {"MLXB_CUDA_GRAPH", "MLXB_ROWS_GRAPH"}) {
    const char* v = std::getenv(name);
    if (v && std::strcmp(v, "0") == 0) return false;
  }
  return true;
}

struct RowGraphs::Entry {
  std::vector<uint64_t> key;
  Tensor in_dev;  // the step's integers, outside the graph's arena
  std::unique_ptr<DeviceGraph> graph;
  Outputs out;    // arena memory: declared last so it is released before the graph
};

RowGraphs::RowGraphs(Device device) : device_(device) {}
RowGraphs::~RowGraphs() = default;

int64_t RowGraphs::rows_bucket(int64_t rows) {
  if (rows <= 1) return 1;
  if (rows <= 8) {
    int64_t b = 2;
    while (b < rows) b *= 2;
    return b;
  }
  if (rows <= 64) return (rows + 7) / 8 * 8;
  if (rows <= 256) return (rows + 31) / 32 * 32;
  return (rows + 63) / 64 * 64;
}

int64_t RowGraphs::width_bucket(int64_t blocks) {
  int64_t w = 8;
  while (w < blocks) w *= 2;
  return w;
}

RowGraphs::Inputs RowGraphs::views(const Tensor& buf, int64_t rows, int64_t width) {
  auto part = [&](Section s) { return buf.slice_rows(offset(s, rows), offset(s, rows) + rows); };
  Inputs in;
  in.ids = part(kIds);
  in.pos = part(kPos);
  in.slots = part(kSlots);
  in.sel = part(kSel);
  in.q_offset = part(kQOffset);
  in.q_count = part(kQCount);
  in.kv_len = part(kKvLen);
  in.table = buf.slice_rows(offset(kTable, rows), offset(kTable, rows) + rows * width).reshape({rows, width});
  return in;
}

bool RowGraphs::recorded(const std::vector<uint64_t>& key) { return !disabled_ && find_recent(entries_, key) != nullptr; }

int64_t RowGraphs::pass_on(const Tensor& next, int64_t n) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(int32_t));
  if (n <= 0 || bytes > Backend::kReadBytes || next.numel() < n) fail(ErrorCode::kInternal, "row graph: pass_on of " + std::to_string(n) + " ids");
  Backend& be = backend(device_);
  if (!fed_.defined()) fed_ = Tensor::zeros({Backend::kReadBytes / static_cast<int64_t>(sizeof(int32_t))}, DType::I32, device_);
  be.copy(fed_.data(), device_, next.data(), device_, bytes);
  return be.read_later(next.data(), bytes);
}

const RowGraphs::Outputs* RowGraphs::run(const std::vector<uint64_t>& key, int64_t rows, int64_t width,
                                         const std::vector<int32_t>& host, const Body& body, int64_t fed_rows) {
  if (disabled_) return nullptr;
  if (static_cast<int64_t>(host.size()) != size(rows, width)) fail(ErrorCode::kInternal, "row graph: input size mismatch");
  Entry* e = find_recent(entries_, key);
  Backend& be = backend(device_);
  if (!e) {
    auto seen = std::find(seen_.begin(), seen_.end(), key);
    if (seen == seen_.end()) {  // first use: the caller runs it eagerly
      if (seen_.size() >= kMaxSeen) seen_.erase(seen_.begin());
      seen_.push_back(key);
      return nullptr;
    }
    seen_.erase(seen);
    auto ne = std::make_unique<Entry>();
    ne->key = key;
    ne->in_dev = Tensor::zeros({size(rows, width)}, DType::I32, device_);
    const Inputs in = views(ne->in_dev, rows, width);
    ne->graph = record_graph(be, "batched decode graph", disabled_, ne->out, [&] { return body(in); });
    if (!ne->graph) return nullptr;
    ++captures_;
    e = add_recent(entries_, std::move(ne), kMaxEntries);
  }
  be.copy(e->in_dev.data(), device_, host.data(), Device::kCPU, static_cast<int64_t>(host.size() * sizeof(int32_t)));
  if (fed_rows > 0) {
    if (!fed_.defined() || fed_rows > rows) fail(ErrorCode::kInternal, "row graph: fed ids without a step before");
    be.copy(static_cast<int32_t*>(e->in_dev.data()) + offset(kIds, rows), device_, fed_.data(), device_,
            fed_rows * static_cast<int64_t>(sizeof(int32_t)));
  }
  e->graph->launch();
  ++replays_;
  return &e->out;
}

}  // namespace mlxb
