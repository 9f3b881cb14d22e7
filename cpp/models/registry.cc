// The family table and load_model (see registry.h and model.h).
#include "models/registry.h"

#include <string>
#include <utility>

namespace mlxb {

namespace {
const std::pair<const char*, FamilyLoader> kFamilies[] = {
    {"llama", load_llama},   {"mistral", load_mistral}, {"qwen2", load_qwen2},         {"qwen3", load_qwen3},
    {"gemma2", load_gemma2}, {"gemma3_text", load_gemma3_text}, {"phi3", load_phi3},
};
}  // namespace

FamilyLoader find_family(const std::string& model_type) {
  for (const auto& [name, fn] : kFamilies)
    if (model_type == name) return fn;
  return nullptr;
}

std::unique_ptr<Model> load_model(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options) {
  FamilyLoader fn = find_family(cfg.model_type);
  if (!fn) fail(ErrorCode::kUnsupported, "model_type '" + cfg.model_type + "' is not supported", "model_type");
  return fn(cfg, store, options);
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
  if (options.progress) options.progress(0.0, "config");
  ModelConfig cfg = load_model_config(dir);
  if (!find_family(cfg.model_type))
    fail(ErrorCode::kUnsupported, "model_type '" + cfg.model_type + "' is not supported", "model_type");
  std::unique_ptr<WeightStore> store = WeightStore::open(dir);
  return load_model(cfg, *store, options);
}

}  // namespace mlxb
