// ops::sample against the host Sampler (test/native/sample_check.h) on the CPU: the generic
// sort-based op, which is the reference of the CUDA kernels, must pick the host Sampler's tokens
// and draw from its distribution. Also the Sampler's own state across calls (its candidate
// storage is reused: a call after a top-p shrink must equal a fresh sampler's call).
// Prints one line per check; exits non-zero on any failure (run by test/sampling-native.test.ts).
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "sample_check.h"

using namespace mlxb;

namespace {

int failures = 0;

// The same seeded sampler twice over a top-p row, then a temperature-only row (its candidate
// vector regrows after the shrink): equal to a sampler at the same generator position whose
// storage saw other rows.
void reuse() {
  std::mt19937 g(3);
  const int64_t v = 5000;
  SamplingParams p;
  p.top_p = 0.3;
  p.has_seed = true;
  p.seed = 11;
  Sampler reused(p, v);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 20; ++i) {
    rows.push_back(sample_check::random_row(g, v, i % 2 ? 4.0 : 0.5, DType::F32));
    // `fresh` reaches the same generator position through other rows (a flat row wherever an
    // earlier call drew), so its candidate storage has another history.
    Sampler fresh(p, v);
    const std::vector<float> flat(static_cast<size_t>(v), 0.f);
    for (int j = 0; j < i; ++j) {
      const std::vector<float> d = fresh.distribution(rows[static_cast<size_t>(j)].data());
      if (std::count_if(d.begin(), d.end(), [](float x) { return x > 0; }) > 1) (void)fresh.sample(flat.data());
    }
    const std::vector<float>& row = rows.back();
    const int32_t a = reused.sample(row.data()).token, b = fresh.sample(row.data()).token;
    CHECK(a == b, "reused sampler %d vs fresh %d at call %d", a, b, i);
  }
  std::printf("sampler storage reuse across calls ok\n");
}

}  // namespace

int main() {
  try {
    reuse();
    sample_check::run(Device::kCPU, false, failures);
  } catch (const Error& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
