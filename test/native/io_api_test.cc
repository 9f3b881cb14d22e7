// C++-only parts of the loader contract that JS cannot reach: expect_tensor (the config-vs-tensor
// cross-check the families call), WeightStore::get / read_owned views and alignment, info() on a
// missing tensor, names / total_bytes / metadata. Writes its own small file; prints
// "all io api tests passed" and exits 0 on success. Run by test/artifacts-native.test.ts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "io/safetensors.h"

#include "check.h"

using namespace mlxb;

static int failures = 0;

// Runs fn, which must throw Error(code) with `field` and a message containing `needle`.
static void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& field, const std::string& needle, int line) {
  try {
    fn();
    std::printf("FAIL line %d: no error\n", line);
    ++failures;
  } catch (const Error& e) {
    if (e.code() != code || e.field() != field || std::string(e.what()).find(needle) == std::string::npos) {
      std::printf("FAIL line %d: got %s field '%s': %s\n", line, error_code_name(e.code()), e.field().c_str(), e.what());
      ++failures;
    }
  }
}
#define EXPECT_ERROR(stmt, code, field, needle) expect_error([&] { stmt; }, code, field, needle, __LINE__)

int main() {
  // Header with an odd length (no padding) so the data section is not aligned in the file.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]},"p":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}})";
  if (header.size() % 2 == 0) header += " ";
  std::string file = "/tmp/mlxb_io_api_test_" + std::to_string(getpid()) + ".safetensors";
  {
    std::ofstream out(file, std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header;
    for (int i = 0; i < 32; ++i) out.put(static_cast<char>(i));
  }
  {
    auto ws = WeightStore::open(file);
    CHECK((ws->names() == std::vector<std::string>{"b", "p", "w"}));
    CHECK(ws->total_bytes() == 32);
    CHECK(ws->metadata().at("format") == "pt");
    CHECK(ws->file_paths().size() == 1 && ws->file_paths()[0] == file);

    const TensorInfo& w = expect_tensor(*ws, "w", {DType::BF16, DType::F16}, {2, 3});
    CHECK(w.dtype == DType::BF16 && w.nbytes == 12);
    CHECK(&expect_tensor(*ws, "w", {DType::BF16}, {-1, 3}) == &w);  // -1 matches any extent
    EXPECT_ERROR(expect_tensor(*ws, "w", {DType::BF16}, {3, 2}), ErrorCode::kInvalidFile, "w", "shape [2, 3], expected [3, 2]");
    EXPECT_ERROR(expect_tensor(*ws, "w", {DType::BF16}, {6}), ErrorCode::kInvalidFile, "w", "expected [6]");
    EXPECT_ERROR(expect_tensor(*ws, "w", {DType::F32, DType::F16}, {2, 3}), ErrorCode::kInvalidFile, "w", "expected float32 or float16");
    EXPECT_ERROR(expect_tensor(*ws, "missing.weight", {DType::F32}, {1}), ErrorCode::kInvalidFile, "missing.weight", "missing tensor");
    EXPECT_ERROR(expect_tensor(*ws, "p", {DType::I32}, {1}), ErrorCode::kUnsupported, "p", "I64");
    EXPECT_ERROR(ws->get("p"), ErrorCode::kUnsupported, "p", "I64");
    EXPECT_ERROR(ws->info("nope"), ErrorCode::kInvalidFile, "nope", "missing tensor");

    Tensor view = ws->get("b");
    Tensor owned = ws->read_owned("b");
    CHECK(view.dtype() == DType::F32 && owned.dtype() == DType::F32);
    CHECK((owned.shape() == Shape{3}));
    CHECK(reinterpret_cast<uintptr_t>(owned.data()) % 64 == 0);
    CHECK(std::memcmp(view.data(), owned.data(), 12) == 0);
    const auto* bytes = static_cast<const unsigned char*>(owned.data());
    CHECK(bytes[0] == 12 && bytes[11] == 23);
    // The view keeps the mapping alive after the store is gone.
    ws.reset();
    CHECK(static_cast<const unsigned char*>(view.data())[0] == 12);
  }
  std::remove(file.c_str());
  if (failures) {
    std::printf("%d io api checks failed\n", failures);
    return 1;
  }
  std::printf("all io api tests passed\n");
  return 0;
}
