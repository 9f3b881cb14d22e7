// The bigram lookup model of table_model.h.
#include "engine/table_model.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace mlxb {

namespace {

class TableModel final : public Model {
 public:
  TableModel(std::vector<float> table, int64_t vocab, double delay_ms) : table_(std::move(table)), delay_ms_(delay_ms) {
    config_.model_type = "table";
    config_.vocab_size = vocab;
  }
  const ModelConfig& config() const override { return config_; }
  GraphCapabilities capabilities() const override { return {}; }
  Device device() const override { return Device::kCPU; }
  int64_t weight_bytes() const override { return static_cast<int64_t>(table_.size() * sizeof(float)); }
  CacheSet make_caches(int64_t) const override { return {}; }

  void forward(const int32_t* ids, int64_t t, CacheSet&, float* logits, bool all_rows) override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms_));
    const int64_t v = config_.vocab_size;
    const int64_t first = all_rows ? 0 : t - 1;
    for (int64_t i = first; i < t; ++i) {
      std::memcpy(logits + (i - first) * v, table_.data() + static_cast<int64_t>(ids[i]) * v, sizeof(float) * v);
    }
  }

 private:
  ModelConfig config_;
  std::vector<float> table_;
  double delay_ms_;
};

}  // namespace

std::shared_ptr<Model> make_table_model(std::vector<float> table, int64_t vocab, double delay_ms) {
  if (vocab <= 0 || static_cast<int64_t>(table.size()) != vocab * vocab) {
    fail(ErrorCode::kInvalidArgument, "table must hold vocab * vocab floats", "table");
  }
  return std::make_shared<TableModel>(std::move(table), vocab, delay_ms);
}

}  // namespace mlxb
