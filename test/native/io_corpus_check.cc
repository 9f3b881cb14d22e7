// Runs the loader bad-input corpus (cases.json written by test/artifacts-corpus.test.ts) straight
// against the C++ API, with no Node-API in between: every case must end in its expected error
// code and field, valid ones must open, and every readable tensor of a valid checkpoint is read
// through both the mapped view and the owned copy and compared. Built by CMake with the rest of
// test/native; also compiled with -fsanitize=address,undefined by hand (see the io report).
// Usage: io_corpus_check cases.json [fuzz_iterations]
//   -> prints mismatches and "io corpus: N cases, M mismatches"; with fuzz_iterations, also
//   mutates the valid files and configs of the corpus at random (seeded) and requires every
//   outcome to be success or the one error code of its kind: "io fuzz: N inputs, M bad".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

using namespace mlxb;

namespace {

const char* expected_code(const std::string& cls) {
  if (cls == "InvalidFileError") return "INVALID_FILE";
  if (cls == "ConfigError") return "INVALID_CONFIG";
  if (cls == "UnsupportedError") return "UNSUPPORTED";
  if (cls == "IoError") return "IO";
  return "?";
}

// Reads every usable tensor both ways; returns false when the bytes differ.
bool read_all(const WeightStore& ws) {
  for (const std::string& name : ws.names()) {
    const TensorInfo& t = ws.info(name);
    if (!t.supported) continue;
    Tensor view = ws.get(name);
    Tensor owned = ws.read_owned(name);
    if (owned.nbytes() != t.nbytes || view.nbytes() != t.nbytes) return false;
    if (t.nbytes && std::memcmp(view.data(), owned.data(), static_cast<size_t>(t.nbytes)) != 0) return false;
  }
  return true;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Byte-level mutations (flip, set to a JSON-significant byte, insert, delete, truncate, rewrite
// the length field) of valid inputs. Returns the number of inputs that did not end in success or
// `allowed`.
int fuzz(const std::vector<std::string>& seeds, bool safetensors, int iterations, uint64_t seed) {
  static const char kBytes[] = "{}[]\",:0123456789-.eE \\\x00\x7f\xff\xc3";
  uint64_t x = seed;
  auto next = [&x] { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; };
  int bad = 0;
  for (int it = 0; it < iterations && !seeds.empty(); ++it) {
    std::string s = seeds[next() % seeds.size()];
    int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t at = next() % s.size();
      switch (next() % 6) {
        case 0: s[at] = static_cast<char>(s[at] ^ (1u << (next() % 8))); break;
        case 1: s[at] = kBytes[next() % (sizeof(kBytes) - 1)]; break;
        case 2: s.insert(at, 1, kBytes[next() % (sizeof(kBytes) - 1)]); break;
        case 3: s.erase(at, 1 + next() % 8); break;
        case 4: s.resize(at); break;
        default:
          if (safetensors && s.size() >= 8) for (int k = 0; k < 8; ++k) s[static_cast<size_t>(k)] = static_cast<char>(next());
          break;
      }
    }
    try {
      if (safetensors) {
        ParsedHeader h;
        parse_safetensors_header(s.data(), static_cast<int64_t>(s.size()), "fuzz", 0, h);
      } else {
        parse_model_config(s);
      }
    } catch (const Error& e) {
      bool ok = safetensors ? e.code() == ErrorCode::kInvalidFile
                            : (e.code() == ErrorCode::kInvalidConfig || e.code() == ErrorCode::kUnsupported);
      if (!ok) { ++bad; std::printf("FUZZ unexpected %s: %s\n", error_code_name(e.code()), e.what()); }
    } catch (const std::exception& e) {
      ++bad;
      std::printf("FUZZ std::exception: %s\n", e.what());
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s cases.json [fuzz_iterations]\n", argv[0]);
    return 2;
  }
  json::Value cases = json::parse(slurp(argv[1]));
  int total = 0, bad = 0;
  std::vector<std::string> weight_seeds, config_seeds;
  for (const json::Value& c : cases.items()) {
    const std::string id = c.find("id")->as_string();
    const std::string op = c.find("op")->as_string();
    const std::string path = c.find("path")->as_string();
    const json::Value* want = c.find("error");
    const json::Value* field = c.find("field");
    ++total;
    std::string got_code = "OK", got_field, message;
    try {
      if (op == "weights") {
        auto ws = WeightStore::open(path);
        if (!read_all(*ws)) { got_code = "BYTES_DIFFER"; }
        if (const json::Value* n = c.find("tensors"); n && static_cast<int64_t>(ws->names().size()) != n->as_int())
          got_code = "WRONG_TENSOR_COUNT";
      } else if (op == "tensor") {
        WeightStore::open(path)->read_owned(c.find("name")->as_string());
      } else {
        load_model_config(path);
      }
    } catch (const Error& e) {
      got_code = error_code_name(e.code());
      got_field = e.field();
      message = e.what();
    } catch (const std::exception& e) {
      got_code = "STD_EXCEPTION";
      message = e.what();
    }
    bool ok;
    if (!want || want->is_null()) {
      ok = got_code == "OK";
    } else {
      ok = got_code == expected_code(want->as_string());
      if (ok && field) {
        bool any = false;
        if (field->is_string()) any = field->as_string() == got_field;
        for (const json::Value& f : field->items()) any = any || f.as_string() == got_field;
        ok = any;
      }
    }
    if (ok && got_code == "OK" && op == "config") config_seeds.push_back(slurp(path + "/config.json"));
    if (ok && got_code == "OK" && op == "weights" && path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0)
      weight_seeds.push_back(slurp(path));
    if (!ok) {
      ++bad;
      std::printf("MISMATCH %s: got %s field '%s' (%s)\n", id.c_str(), got_code.c_str(), got_field.c_str(), message.c_str());
    }
  }
  std::printf("io corpus: %d cases, %d mismatches\n", total, bad);
  if (argc == 3) {
    int n = std::atoi(argv[2]);
    int fb = fuzz(weight_seeds, true, n, 0x9e3779b97f4a7c15ull) + fuzz(config_seeds, false, n, 0xd1b54a32d192ed03ull);
    std::printf("io fuzz: %d inputs, %d bad\n", 2 * n, fb);
    bad += fb;
  }
  return bad == 0 ? 0 : 1;
}
