// safetensors files by mmap, with every check the reference implementation makes (header length
// bound, UTF-8 JSON object, known dtypes, checked size arithmetic, offsets contiguous with no hole
// or overlap, data covering the file exactly) and sharded checkpoints through
// model.safetensors.index.json (shard names confined to the model directory). Malformed input
// throws Error(kInvalidFile, message, tensor-or-file name); nothing is allocated per tensor
// before the whole header validated.
//
// Stricter than the reference in three places: duplicate JSON keys, unknown keys inside a tensor
// entry, and a sharded index whose weight_map disagrees with the shards are all kInvalidFile.
// Dtypes: F32, F16, BF16, I32, U32, U8, I8 are usable. The other dtypes of the format (BOOL, I16,
// U16, I64, U64, F64, F8_E4M3, F8_E5M2, F8_E8M0, F4, F6_E2M3, F6_E3M2, C64) are recognised, sized
// and validated so that a file holding one (e.g. an int64 position buffer) still opens; only
// reading such a tensor (get / read_owned / expect_tensor) throws kUnsupported naming it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mlxb {

struct TensorInfo {
  std::string name;
  std::string file_dtype;   // dtype as written in the file ("BF16", "I64", ...)
  bool supported = false;   // file_dtype maps onto a DType; `dtype` is meaningful only then
  DType dtype = DType::F32;
  Shape shape;
  int64_t offset = 0;  // bytes from the start of the data section
  int64_t nbytes = 0;
  int file = 0;        // index into WeightStore files
};

class WeightStore {
 public:
  static constexpr int64_t kMaxHeaderBytes = 100'000'000;  // same bound as the reference

  // One .safetensors file, or a directory holding model.safetensors.index.json (sharded), else
  // model.safetensors, else exactly one *.safetensors file. kIo when nothing is there.
  static std::unique_ptr<WeightStore> open(const std::string& path);
  // Validates and maps one file (no directory logic; used by tests and fuzzing).
  static std::unique_ptr<WeightStore> open_file(const std::string& file);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // kInvalidFile "missing tensor" when absent
  // A CPU tensor viewing the mapped bytes (shares the mapping; zero copy). The view is only as
  // aligned as the file made it; kernels wanting 64-byte alignment use read_owned.
  Tensor get(const std::string& name) const;
  // Copies the tensor into fresh 64-byte-aligned host memory and lets the kernel drop the
  // mapped pages (decode from owned pages is faster than from a file mapping).
  Tensor read_owned(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  int64_t total_bytes() const;             // sum of tensor data bytes
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<std::string>& file_paths() const { return paths_; }

  // Internal: filled by open()/open_file().
  struct Mapping;
  std::vector<std::shared_ptr<Mapping>> files_;
  std::vector<std::string> paths_;
  std::map<std::string, TensorInfo> index_;
  std::map<std::string, std::string> metadata_;
};

// Cross-check of config against tensors: the tensor must exist, have one of `dtypes` and the
// given shape (-1 in `shape` matches any extent). Throws kInvalidFile naming the tensor with the
// expected and actual shape / dtype (kUnsupported when the file dtype is not usable at all).
const TensorInfo& expect_tensor(const WeightStore& store, const std::string& name,
                                std::initializer_list<DType> dtypes, const Shape& shape);

std::string shape_string(const Shape& s);  // "[4096, 2048]"

}  // namespace mlxb
