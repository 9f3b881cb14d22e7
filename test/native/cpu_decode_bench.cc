// Decode-shaped CPU benchmark without Node: the matmuls of one decode token of a Llama-3.2-1B
// shape (16 layers of q, k, v, o, gate, up, down + the tied 128256-row head) over weights that
// live in distinct buffers (2.5 GB in bf16, 0.7 GB in 4-bit: far past any cache), as decode
// reads them. Prints the best and median time per token, GB/s and tok/s of the matmuls alone,
// plus the CPU time the process used (a busy machine shows CPU share < threads).
//
// cpu_decode_bench [bf16|q4|q8|bw|pool|bf16-hot|q4-hot] [--reps 5] [--layers 16] [--huge 0|1]
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/ops.h"

using namespace mlxb;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Shape2 {
  const char* name;
  int64_t n, k;
};
const Shape2 kLayer[] = {{"q", 2048, 2048}, {"k", 512, 2048}, {"v", 512, 2048}, {"o", 2048, 2048},
                         {"gate", 8192, 2048}, {"up", 8192, 2048}, {"down", 2048, 8192}};
const Shape2 kHead = {"head", 128256, 2048};

void fill_random(void* p, int64_t bytes, uint32_t seed) {
  uint32_t* w = static_cast<uint32_t*>(p);
  for (int64_t i = 0; i < bytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    w[i] = seed;
  }
}

// bf16 values in about +-0.01 (sign and mantissa random, exponent fixed): finite, no denormals.
void fill_bf16(Tensor& t, uint32_t seed) {
  uint16_t* h = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = static_cast<uint16_t>(0x3c00 | ((seed >> 16) & 0x7f) | (seed & 0x8000));
  }
}

bool g_huge = true;  // --huge 0: ordinary 4 KiB pages for the weights

// As WeightStore::read_owned: 2 MiB aligned, MADV_HUGEPAGE from 2 MiB up.
Tensor weight_tensor(const Shape& shape, DType dt) {
  int64_t bytes = dtype_size(dt);
  for (int64_t d : shape) bytes *= d;
  const int64_t huge = int64_t{2} << 20;
  if (!g_huge || bytes < huge) return Tensor::empty(shape, dt);
  const int64_t rounded = (bytes + huge - 1) / huge * huge;
  void* p = std::aligned_alloc(static_cast<size_t>(huge), static_cast<size_t>(rounded));
  madvise(p, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  auto st = std::make_shared<Storage>();
  st->data = p;
  st->bytes = bytes;
  st->release = [](void* q) { std::free(q); };
  return Tensor(std::move(st), 0, dt, shape);
}

struct Op {
  Tensor w;          // bf16 weight
  QuantWeight q;     // or quantized
  int64_t n = 0, k = 0;
  int64_t bytes() const { return w.defined() ? w.nbytes() : q.packed.nbytes() + q.scales.nbytes() + q.biases.nbytes(); }
};

Op make_op(const Shape2& s, int bits, uint32_t seed) {
  Op op;
  op.n = s.n;
  op.k = s.k;
  if (bits == 0) {
    op.w = weight_tensor({s.n, s.k}, DType::BF16);
    fill_bf16(op.w, seed);
    return op;
  }
  const int gs = 64;
  op.q.bits = bits;
  op.q.group_size = gs;
  op.q.rows = s.n;
  op.q.cols = s.k;
  op.q.packed = weight_tensor({s.n, s.k * bits / 32}, DType::U32);
  fill_random(op.q.packed.data(), op.q.packed.nbytes(), seed);
  op.q.scales = Tensor::empty({s.n, s.k / gs}, DType::BF16);
  op.q.biases = Tensor::empty({s.n, s.k / gs}, DType::BF16);
  uint16_t* sc = op.q.scales.ptr<uint16_t>();
  uint16_t* bi = op.q.biases.ptr<uint16_t>();
  for (int64_t i = 0; i < op.q.scales.numel(); ++i) {
    sc[i] = 0x3c00 | static_cast<uint16_t>(i & 0x3f);  // ~0.008
    bi[i] = 0xbc80;                                      // ~-0.016
  }
  return op;
}

void run_bw(int reps) {
  const int64_t bytes = int64_t{1} << 30;
  for (int huge = 0; huge < 2; ++huge) {
    void* p = std::aligned_alloc(int64_t{2} << 20, static_cast<size_t>(bytes));
    if (huge) madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
    std::memset(p, 1, static_cast<size_t>(bytes));
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<uint64_t> sums(64);
      parallel_for(bytes / 4096, 256, [&](int64_t b, int64_t e) {
        const uint64_t* q = static_cast<const uint64_t*>(p) + b * 512;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t i = 0; i < (e - b) * 512; i += 8) { s0 ^= q[i]; s1 ^= q[i + 2]; s2 ^= q[i + 4]; s3 ^= q[i + 6]; }
        sums[static_cast<size_t>(b % 64)] = s0 ^ s1 ^ s2 ^ s3;
      });
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("read bandwidth %s: best %.1f GB/s, median %.1f GB/s\n", huge ? "MADV_HUGEPAGE" : "4k pages   ",
                bytes / t[0] / 1e9, bytes / t[t.size() / 2] / 1e9);
    std::free(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "bf16";
  int reps = 5, layers = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--layers") == 0) layers = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--huge") == 0) g_huge = std::atoi(argv[i + 1]) != 0;
  }
  std::printf("threads %d\n", num_threads());
  if (mode == "pool") {
    // One parallel_for of 32 us of work (16 us ideal on 2 threads): wake-up and hand-back cost.
    std::vector<double> t;
    volatile int64_t sink = 0;
    for (int r = 0; r < 20000; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      parallel_for(64, 1, [&](int64_t b, int64_t e) {  // 0.5 us of work per item: 16 us ideal on 2 threads
        auto w0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < 0.5e-6 * (e - b)) {}
        sink = sink + (e - b);
      });
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (r % 7 == 0) {  // a gap of serial work between calls, as between decode ops
        auto g0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count() < 20e-6) {}
      }
    }
    std::sort(t.begin(), t.end());
    std::printf("parallel_for: median %.1f us, p90 %.1f us, p99 %.1f us\n", t[t.size() / 2] * 1e6, t[t.size() * 9 / 10] * 1e6,
                t[t.size() * 99 / 100] * 1e6);
    return 0;
  }
  if (mode == "bw") {
    run_bw(reps);
    return 0;
  }
  const bool hot = mode.size() > 4 && mode.compare(mode.size() - 4, 4, "-hot") == 0;
  if (hot) mode = mode.substr(0, mode.size() - 4);
  const int bits = mode == "q4" ? 4 : mode == "q8" ? 8 : 0;
  if (hot) {
    // Kernel speed with the weight in cache (512 x 2048): best of many calls, robust to noise.
    const int64_t hn = layers == 16 ? 512 : layers * 32;  // --layers L: 32 L rows instead of 512
    Op op = make_op({"hot", hn, 2048}, bits, 7);
    Tensor x = Tensor::empty({1, 2048}, DType::F32), y = Tensor::empty({1, hn}, DType::F32);
    for (int64_t i = 0; i < 2048; ++i) x.ptr<float>()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    double best = 1e30;
    for (int r = 0; r < 200 * reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (bits) ops::qmatmul(x, op.q, nullptr, y);
      else ops::matmul(x, op.w, nullptr, y);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s in cache [%lldx2048] M=1: best %.1f us, %.1f G weights/s\n", mode.c_str(), (long long)hn, best * 1e6,
                hn * 2048 / best / 1e9);
    return 0;
  }
  std::vector<std::vector<Op>> ops(static_cast<size_t>(layers));
  uint32_t seed = 1;
  int64_t total = 0;
  for (auto& l : ops)
    for (const Shape2& s : kLayer) {
      l.push_back(make_op(s, bits, seed++));
      total += l.back().bytes();
    }
  Op head = make_op(kHead, bits, seed++);
  total += head.bytes();
  Tensor x = Tensor::empty({1, 8192}, DType::F32), y = Tensor::empty({1, 128256}, DType::F32);
  for (int64_t i = 0; i < 8192; ++i) x.ptr<float>()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  std::vector<double> per_op(8, 0.0);
  auto apply = [&](const Op& op, int slot) {
    Tensor xi = x.as_strided({1, op.k}, {op.k, 1}, 0), yi = y.as_strided({1, op.n}, {op.n, 1}, 0);
    auto t0 = std::chrono::steady_clock::now();
    if (bits) ops::qmatmul(xi, op.q, nullptr, yi);
    else ops::matmul(xi, op.w, nullptr, yi);
    per_op[static_cast<size_t>(slot)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> t;
  double cpu = 0, wall = 0;
  for (int r = 0; r < reps + 1; ++r) {
    if (r == 1) std::fill(per_op.begin(), per_op.end(), 0.0);
    const double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto& l : ops)
      for (size_t i = 0; i < l.size(); ++i) apply(l[i], static_cast<int>(i));
    apply(head, 7);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) continue;  // warm-up
    t.push_back(dt);
    wall += dt;
    cpu += cpu_seconds() - c0;
  }
  std::sort(t.begin(), t.end());
  std::printf("%s decode matmuls (%d layers + head, %.2f GB): best %.2f ms (%.1f tok/s, %.1f GB/s), median %.2f ms "
              "(%.1f tok/s), CPU share %.0f%%, CPU time %.2f ms/token\n",
              mode.c_str(), layers, total / 1e9, t[0] * 1e3, 1 / t[0], total / t[0] / 1e9, t[t.size() / 2] * 1e3,
              1 / t[t.size() / 2], 100 * cpu / wall / num_threads(), cpu * 1e3 / reps);
  const char* names[] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
  std::printf("per op (mean ms/token):");
  for (int i = 0; i < 8; ++i) std::printf(" %s %.2f", names[i], per_op[static_cast<size_t>(i)] * 1e3 / reps);
  std::printf("\n");
  return 0;
}
