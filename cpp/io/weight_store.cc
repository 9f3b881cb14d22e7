// WeightStore: which files make up a checkpoint (single file, model dir, sharded index), the
// merged tensor index, and tensor access (zero-copy views and owned aligned copies).
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/thread_pool.h"
#include "core/weight_memory.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace mlxb {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr int64_t kMaxIndexBytes = 100'000'000;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool stat_kind(const std::string& path, bool* is_dir) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return false;
  *is_dir = S_ISDIR(st.st_mode);
  return true;
}

std::string join(const std::string& dir, const std::string& name) {
  return (!dir.empty() && dir.back() == '/') ? dir + name : dir + "/" + name;
}

// A shard name from an index must name a file directly inside the model directory.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  const char* why = nullptr;
  if (shard.empty()) why = "is empty";
  else if (shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos) why = "contains a path separator";
  else if (shard.find("..") != std::string::npos) why = "contains '..'";
  else if (shard.find('\0') != std::string::npos) why = "contains a NUL character";
  else if (!ends_with(shard, ".safetensors")) why = "does not end in .safetensors";
  if (why)
    fail(ErrorCode::kInvalidFile, index_path + ": shard name '" + shard + "' for tensor '" + tensor + "' " + why +
                                      " (shards must be files inside the model directory)", tensor);
}

std::string read_small_file(const std::string& path, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kIo, "cannot open " + path + ": " + std::strerror(errno), path);
  in.seekg(0, std::ios::end);
  std::streamoff n = in.tellg();
  if (n < 0) fail(ErrorCode::kIo, "cannot read " + path, path);
  if (n > limit) fail(ErrorCode::kInvalidFile, path + " is larger than " + std::to_string(limit) + " bytes", path);
  std::string s(static_cast<size_t>(n), '\0');
  in.seekg(0);
  in.read(s.data(), n);
  if (!in) fail(ErrorCode::kIo, "cannot read " + path, path);
  return s;
}

void add_file(WeightStore& ws, const std::string& path) {
  auto m = map_file(path);
  ParsedHeader h;
  parse_safetensors_header(static_cast<const char*>(m->storage->data), m->size, path,
                           static_cast<int>(ws.files_.size()), h);
  m->data_start = h.data_start;
  for (TensorInfo& t : h.tensors) {
    std::string name = t.name;
    if (!ws.index_.emplace(name, std::move(t)).second)
      fail(ErrorCode::kInvalidFile, path + ": tensor '" + name + "' appears in more than one file", name);
  }
  for (auto& [k, v] : h.metadata) ws.metadata_.emplace(k, v);
  ws.files_.push_back(std::move(m));
  ws.paths_.push_back(path);
}

std::unique_ptr<WeightStore> open_sharded(const std::string& dir) {
  std::string index_path = join(dir, kIndexName);
  std::string text = read_small_file(index_path, kMaxIndexBytes);
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const json::JsonError& e) {
    fail(ErrorCode::kInvalidFile, index_path + ": not valid JSON: " + e.what(), kIndexName);
  }
  if (!root.is_object()) fail(ErrorCode::kInvalidFile, index_path + ": must be a JSON object", kIndexName);
  const json::Value* wm = root.find("weight_map");
  if (!wm || !wm->is_object()) fail(ErrorCode::kInvalidFile, index_path + ": 'weight_map' must be an object", "weight_map");
  if (wm->members().empty()) fail(ErrorCode::kInvalidFile, index_path + ": 'weight_map' is empty", "weight_map");

  std::vector<std::string> shards;  // first-appearance order
  std::map<std::string, std::string> wanted;
  for (const auto& [tensor, shard] : wm->members()) {
    if (!shard.is_string())
      fail(ErrorCode::kInvalidFile, index_path + ": weight_map entry '" + tensor + "' must be a string", tensor);
    check_shard_name(index_path, tensor, shard.as_string());
    if (std::find(shards.begin(), shards.end(), shard.as_string()) == shards.end()) shards.push_back(shard.as_string());
    wanted[tensor] = shard.as_string();
  }

  auto ws = std::make_unique<WeightStore>();
  for (const std::string& shard : shards) {
    std::string path = join(dir, shard);
    bool is_dir = false;
    if (!stat_kind(path, &is_dir) || is_dir)
      fail(ErrorCode::kIo, index_path + ": shard '" + shard + "' is missing from " + dir, shard);
    add_file(*ws, path);
  }
  for (const auto& [name, t] : ws->index_) {
    auto it = wanted.find(name);
    const std::string& shard = shards[static_cast<size_t>(t.file)];
    if (it == wanted.end())
      fail(ErrorCode::kInvalidFile, index_path + ": tensor '" + name + "' in " + shard + " is not listed in weight_map", name);
    if (it->second != shard)
      fail(ErrorCode::kInvalidFile, index_path + ": tensor '" + name + "' is mapped to " + it->second + " but stored in " + shard, name);
  }
  for (const auto& [name, shard] : wanted)
    if (!ws->index_.count(name))
      fail(ErrorCode::kInvalidFile, index_path + ": tensor '" + name + "' is mapped to " + shard + " which does not hold it", name);
  return ws;
}

}  // namespace

std::unique_ptr<WeightStore> WeightStore::open_file(const std::string& file) {
  auto ws = std::make_unique<WeightStore>();
  add_file(*ws, file);
  return ws;
}

std::unique_ptr<WeightStore> WeightStore::open(const std::string& path) {
  bool is_dir = false;
  if (!stat_kind(path, &is_dir)) fail(ErrorCode::kIo, "no such file or directory: " + path, path);
  if (!is_dir) return open_file(path);
  bool sub_dir = false;
  if (stat_kind(join(path, kIndexName), &sub_dir) && !sub_dir) return open_sharded(path);
  if (stat_kind(join(path, "model.safetensors"), &sub_dir) && !sub_dir) return open_file(join(path, "model.safetensors"));
  std::vector<std::string> found;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (ends_with(n, ".safetensors")) found.push_back(n);
    }
    closedir(d);
  } else {
    fail(ErrorCode::kIo, "cannot list " + path + ": " + std::strerror(errno), path);
  }
  if (found.empty()) fail(ErrorCode::kIo, path + " holds no .safetensors file", path);
  if (found.size() > 1)
    fail(ErrorCode::kInvalidFile, path + " holds " + std::to_string(found.size()) + " .safetensors files but no " + kIndexName, path);
  return open_file(join(path, found[0]));
}

const TensorInfo& WeightStore::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail(ErrorCode::kInvalidFile, "missing tensor '" + name + "' in the checkpoint", name);
  return it->second;
}

static void require_supported(const TensorInfo& t) {
  if (!t.supported)
    fail(ErrorCode::kUnsupported, "tensor '" + t.name + "' has dtype " + t.file_dtype + ", which this build cannot use", t.name);
}

Tensor WeightStore::get(const std::string& name) const {
  const TensorInfo& t = info(name);
  require_supported(t);
  const Mapping& m = *files_.at(static_cast<size_t>(t.file));
  return Tensor(m.storage, m.data_start + t.offset, t.dtype, t.shape);
}

Tensor WeightStore::read_owned(const std::string& name) const {
  const TensorInfo& t = info(name);
  require_supported(t);
  const Mapping& m = *files_.at(static_cast<size_t>(t.file));
  Tensor out = weight_memory(t.shape, t.dtype, t.name);  // huge pages from 2 MiB (weight_memory.h)
  if (t.nbytes == 0) return out;
  // pread from the page cache into the owned pages: the mapping is never touched, so its pages
  // are not faulted in (and need not be given back) and the copy skips a page-table walk.
  const int64_t base = m.data_start + t.offset;
  char* dst = static_cast<char*>(out.data());
  constexpr int64_t kChunk = int64_t{8} << 20;
  const int64_t chunks = (t.nbytes + kChunk - 1) / kChunk;
  std::atomic<int> err{0};
  parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e && err.load() == 0; ++c) {
      int64_t off = c * kChunk;
      int64_t end = std::min(t.nbytes, off + kChunk);
      while (off < end) {
        ssize_t r = pread(m.fd, dst + off, static_cast<size_t>(end - off), static_cast<off_t>(base + off));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { err = r < 0 ? errno : EIO; break; }
        off += r;
      }
    }
  });
  if (err) fail(ErrorCode::kIo, "cannot read tensor '" + name + "' from " + m.path + ": " + std::strerror(err.load()), name);
  return out;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> v;
  v.reserve(index_.size());
  for (const auto& kv : index_) v.push_back(kv.first);
  return v;
}

int64_t WeightStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& kv : index_) n += kv.second.nbytes;
  return n;
}

std::string shape_string(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

const TensorInfo& expect_tensor(const WeightStore& store, const std::string& name, std::initializer_list<DType> dtypes,
                                const Shape& shape) {
  const TensorInfo& t = store.info(name);
  require_supported(t);
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
    std::string want;
    for (DType d : dtypes) want += (want.empty() ? "" : " or ") + std::string(dtype_name(d));
    fail(ErrorCode::kInvalidFile, "tensor '" + name + "' has dtype " + dtype_name(t.dtype) + ", expected " + want, name);
  }
  bool ok = t.shape.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || shape[i] == t.shape[i];
  if (!ok)
    fail(ErrorCode::kInvalidFile, "tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " +
                                      shape_string(shape) + " from the config", name);
  return t;
}

}  // namespace mlxb
