// Pieces shared by safetensors.cc (one file: map + validate) and weight_store.cc (directories,
// sharding, tensor access). Not part of the public contract.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace mlxb {

// A read-only mapping of one whole file; `storage` owns it (munmap on release) so that tensor
// views keep it alive. `fd` stays open for read_owned, which preads instead of touching the map.
struct WeightStore::Mapping {
  std::string path;
  int fd = -1;
  int64_t size = 0;
  std::shared_ptr<Storage> storage;
  int64_t data_start = 0;  // 8 + header length
  ~Mapping();
};

struct ParsedHeader {
  int64_t data_start = 0;
  int64_t data_len = 0;
  std::vector<TensorInfo> tensors;  // file order
  std::map<std::string, std::string> metadata;
};

// Validates the complete file image `bytes[0, size)`; `file` names it in errors.
void parse_safetensors_header(const char* bytes, int64_t size, const std::string& file, int file_index, ParsedHeader& out);

// Opens and maps `path` read-only (kIo when it cannot).
std::shared_ptr<WeightStore::Mapping> map_file(const std::string& path);

}  // namespace mlxb
