// One safetensors file: map it read-only and validate its header completely before any tensor
// is indexed. Layout: u64 little-endian header length N, N bytes of UTF-8 JSON object (may be
// padded with trailing spaces), then the data section. Directory / sharding logic lives in
// weight_store.cc.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace mlxb {

WeightStore::Mapping::~Mapping() {
  if (fd >= 0) ::close(fd);
}

namespace {

struct DTypeEntry {
  const char* name;
  int bits;
  bool supported;
  DType dtype;
};

// Every dtype the format defines; only those with `supported` map onto our DType.
constexpr DTypeEntry kDTypes[] = {
    {"F32", 32, true, DType::F32},   {"F16", 16, true, DType::F16},   {"BF16", 16, true, DType::BF16},
    {"I32", 32, true, DType::I32},   {"U32", 32, true, DType::U32},   {"U8", 8, true, DType::U8},
    {"I8", 8, true, DType::I8},      {"BOOL", 8, false, DType::U8},   {"I16", 16, false, DType::U8},
    {"U16", 16, false, DType::U8},   {"I64", 64, false, DType::U8},   {"U64", 64, false, DType::U8},
    {"F64", 64, false, DType::U8},   {"C64", 64, false, DType::U8},   {"F8_E4M3", 8, false, DType::U8},
    {"F8_E5M2", 8, false, DType::U8}, {"F8_E8M0", 8, false, DType::U8}, {"F4", 4, false, DType::U8},
    {"F6_E2M3", 6, false, DType::U8}, {"F6_E3M2", 6, false, DType::U8},
};

[[noreturn]] void bad(const std::string& file, const std::string& what, const std::string& field) {
  fail(ErrorCode::kInvalidFile, file + ": " + what, field);
}

[[noreturn]] void bad_tensor(const std::string& file, const std::string& tensor, const std::string& what) {
  bad(file, "tensor '" + tensor + "': " + what, tensor);
}

int64_t mul_or_fail(int64_t a, int64_t b, const std::string& file, const std::string& tensor) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) bad_tensor(file, tensor, "size overflows 64 bits");
  return r;
}

struct Span {
  int64_t begin, end;
  const std::string* name;
};

TensorInfo parse_entry(const std::string& file, const std::string& name, const json::Value& v) {
  if (!v.is_object()) bad_tensor(file, name, std::string("entry must be an object, got ") + json::kind_name(v.kind()));
  const json::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
  for (const auto& [k, x] : v.members()) {
    if (k == "dtype") dtype = &x;
    else if (k == "shape") shape = &x;
    else if (k == "data_offsets") offsets = &x;
    else bad_tensor(file, name, "unknown key '" + k + "'");
  }
  if (!dtype) bad_tensor(file, name, "missing 'dtype'");
  if (!shape) bad_tensor(file, name, "missing 'shape'");
  if (!offsets) bad_tensor(file, name, "missing 'data_offsets'");
  if (!dtype->is_string()) bad_tensor(file, name, "'dtype' must be a string");

  TensorInfo info;
  info.name = name;
  const DTypeEntry* de = nullptr;
  for (const DTypeEntry& e : kDTypes)
    if (dtype->as_string() == e.name) de = &e;
  if (!de) bad_tensor(file, name, "unknown dtype '" + dtype->as_string() + "'");
  info.file_dtype = de->name;
  info.supported = de->supported;
  info.dtype = de->dtype;

  if (!shape->is_array()) bad_tensor(file, name, "'shape' must be an array of non-negative integers");
  int64_t numel = 1;
  for (const json::Value& d : shape->items()) {
    if (!d.is_int() || d.as_int() < 0) bad_tensor(file, name, "'shape' must be an array of non-negative integers");
    info.shape.push_back(d.as_int());
    numel = mul_or_fail(numel, d.as_int(), file, name);
  }
  int64_t bits = mul_or_fail(numel, de->bits, file, name);
  if (bits % 8 != 0) bad_tensor(file, name, "element count does not fill whole bytes for " + info.file_dtype);
  info.nbytes = bits / 8;

  if (!offsets->is_array() || offsets->items().size() != 2)
    bad_tensor(file, name, "'data_offsets' must be [begin, end]");
  const json::Value& b = offsets->items()[0];
  const json::Value& e = offsets->items()[1];
  if (!b.is_int() || !e.is_int() || b.as_int() < 0 || e.as_int() < 0)
    bad_tensor(file, name, "'data_offsets' must be non-negative integers");
  if (e.as_int() < b.as_int()) bad_tensor(file, name, "'data_offsets' end is before begin");
  if (e.as_int() - b.as_int() != info.nbytes)
    bad_tensor(file, name, "data_offsets span " + std::to_string(e.as_int() - b.as_int()) + " bytes but " +
                               info.file_dtype + shape_string(info.shape) + " needs " + std::to_string(info.nbytes));
  info.offset = b.as_int();
  return info;
}

}  // namespace

void parse_safetensors_header(const char* bytes, int64_t size, const std::string& file, int file_index,
                              ParsedHeader& out) {
  if (size < 8) bad(file, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length", file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > static_cast<uint64_t>(WeightStore::kMaxHeaderBytes))
    bad(file, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(WeightStore::kMaxHeaderBytes), file);
  if (n > static_cast<uint64_t>(size - 8))
    bad(file, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) + " bytes)", file);
  const char* header = bytes + 8;
  int64_t header_len = static_cast<int64_t>(n);
  if (header_len == 0 || header[0] != '{') bad(file, "header does not start with '{'", file);
  if (!json::valid_utf8(header, static_cast<size_t>(header_len))) bad(file, "header is not valid UTF-8", file);

  json::Value root;
  try {
    root = json::parse(header, static_cast<size_t>(header_len));
  } catch (const json::JsonError& e) {
    bad(file, std::string("header is not valid JSON: ") + e.what(), file);
  }
  if (!root.is_object()) bad(file, "header must be a JSON object", file);

  out.data_start = 8 + header_len;
  out.data_len = size - out.data_start;
  std::vector<TensorInfo> infos;
  infos.reserve(root.members().size());
  for (const auto& [key, v] : root.members()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;  // the reference reads it as an optional map
      if (!v.is_object()) bad(file, "__metadata__ must be an object of strings", "__metadata__");
      for (const auto& [mk, mv] : v.members()) {
        if (!mv.is_string()) bad(file, "__metadata__ value '" + mk + "' must be a string", "__metadata__");
        out.metadata[mk] = mv.as_string();
      }
      continue;
    }
    infos.push_back(parse_entry(file, key, v));
    infos.back().file = file_index;
  }

  std::vector<Span> spans;
  spans.reserve(infos.size());
  for (const TensorInfo& t : infos) spans.push_back({t.offset, t.offset + t.nbytes, &t.name});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  for (const Span& s : spans) {
    if (s.begin != at)
      bad_tensor(file, *s.name, s.begin > at ? "hole in the data section before offset " + std::to_string(s.begin)
                                              : "overlaps the previous tensor at offset " + std::to_string(s.begin));
    at = s.end;
  }
  if (at != out.data_len)
    bad(file, "tensors cover " + std::to_string(at) + " bytes but the data section holds " + std::to_string(out.data_len), file);
  for (TensorInfo& t : infos) out.tensors.push_back(std::move(t));
}

std::shared_ptr<WeightStore::Mapping> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorCode::kIo, "cannot open " + path + ": " + std::strerror(errno), path);
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(ErrorCode::kIo, "cannot stat " + path + ": " + std::strerror(err), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::kIo, path + " is not a regular file", path);
  }
  auto m = std::make_shared<WeightStore::Mapping>();
  m->fd = fd;  // owned by the mapping from here on
  m->path = path;
  m->size = static_cast<int64_t>(st.st_size);
  m->storage = std::make_shared<Storage>();
  if (m->size > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(m->size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      fail(ErrorCode::kIo, "cannot mmap " + path + ": " + std::strerror(err), path);
    }
    size_t len = static_cast<size_t>(m->size);
    m->storage->data = p;
    m->storage->bytes = m->size;
    m->storage->release = [len](void* q) { munmap(q, len); };
  }
  return m;
}

}  // namespace mlxb
