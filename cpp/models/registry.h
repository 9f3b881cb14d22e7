// model_type -> family loader. Each family file (named by the Hugging Face model_type) defines
// one loader; registry.cc lists them. Adding a family is one file plus one line there.
#pragma once
#include <memory>
#include <string>

#include "io/config.h"
#include "io/safetensors.h"
#include "models/model.h"

namespace mlxb {

using FamilyLoader = std::unique_ptr<Model> (*)(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options);

std::unique_ptr<Model> load_llama(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_mistral(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_qwen2(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_qwen3(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_gemma2(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_gemma3_text(const ModelConfig&, const WeightStore&, const LoadOptions&);
std::unique_ptr<Model> load_phi3(const ModelConfig&, const WeightStore&, const LoadOptions&);

// nullptr when model_type is not supported.
FamilyLoader find_family(const std::string& model_type);

// Loads from an already-parsed config and opened store (load_model does both first).
std::unique_ptr<Model> load_model(const ModelConfig& cfg, const WeightStore& store, const LoadOptions& options);

}  // namespace mlxb
