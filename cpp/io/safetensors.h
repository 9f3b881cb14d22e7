// safetensors files by mmap, with every check the reference implementation makes (header length
// bound, UTF-8 JSON object, known dtypes, checked size arithmetic, offsets contiguous with no hole
// or overlap, data covering the file exactly) and sharded checkpoints through
// model.safetensors.index.json (shard names confined to the model directory). Malformed input
// throws Error(kInvalidFile, message, tensor-or-file name); nothing is allocated per tensor
// before the whole header validated.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mlxb {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t offset = 0;  // bytes from the start of the data section
  int64_t nbytes = 0;
  int file = 0;        // index into WeightStore files
};

class WeightStore {
 public:
  // One .safetensors file, a directory holding model.safetensors, or a directory with
  // model.safetensors.index.json (or a single *.safetensors file).
  static std::unique_ptr<WeightStore> open(const std::string& path);
  // Validates one file's bytes without a directory (used by tests and fuzzing).
  static std::unique_ptr<WeightStore> open_file(const std::string& file);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // kInvalidFile "missing tensor" when absent
  // A CPU tensor viewing the mapped bytes (shares the mapping; zero copy).
  Tensor get(const std::string& name) const;
  std::vector<std::string> names() const;
  int64_t total_bytes() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Internal: used by open()
  struct Mapping;
  std::vector<std::shared_ptr<Mapping>> files_;
  std::map<std::string, TensorInfo> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mlxb
