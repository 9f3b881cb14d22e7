// Runs the loader bad-input corpus (cases.json written by test/artifacts-corpus.test.ts) straight
// against the C++ API, with no Node-API in between: every case must end in its expected error
// code and field, valid ones must open, and every readable tensor of a valid checkpoint is read
// through both the mapped view and the owned copy and compared. Built by CMake with the rest of
// test/native; also compiled with -fsanitize=address,undefined by hand (see the io report).
// Usage: io_corpus_check cases.json   -> prints mismatches and "io corpus: N cases, M mismatches"
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "io/json.h"
#include "io/safetensors.h"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s cases.json\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json::Value cases = json::parse(ss.str());
  int total = 0, bad = 0;
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
    if (!ok) {
      ++bad;
      std::printf("MISMATCH %s: got %s field '%s' (%s)\n", id.c_str(), got_code.c_str(), got_field.c_str(), message.c_str());
    }
  }
  std::printf("io corpus: %d cases, %d mismatches\n", total, bad);
  return bad == 0 ? 0 : 1;
}
