// cuBLASLt through dlopen (see cublaslt.h). Descriptors and the chosen algorithm are cached per
// (M, N, K, dtype); one workspace of 32 MiB serves every call (all calls share one stream).
// Few-row products (the engine's batched decode steps, 8 < M <= 256) are timed at their first
// eager use: the heuristic's candidates plus split-K variants of its first ones, each run on the
// caller's stream after a write that evicts L2 (the weights of a real step are never resident);
// the fastest is kept unless the heuristic's first choice is within 3% of it.
// MLXB_CUBLASLT_TUNE=0 keeps the heuristic's first choice; MLXB_CUBLASLT_LOG=1 prints each timing.
#include "backend/cuda/cublaslt.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace mlxb::cuda {

void* device_alloc(int64_t bytes, const char* what);  // allocator.cu

namespace {
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo { uint64_t data[8]; };
struct Heuristic {
  Algo algo;
  size_t workspace_size;
  int state;
  float waves;
  int reserved[4];
};

enum : int {
  kComputeF32 = 68,      // CUBLAS_COMPUTE_32F
  kR32F = 0, kR16F = 2, kR16BF = 14,  // cudaDataType
  kOpN = 0, kOpT = 1,
  kDescTransA = 3, kDescTransB = 4,
  kPrefMaxWorkspace = 1,
  kConfigSplitK = 2, kConfigReduction = 3,  // cublasLtMatmulAlgoConfigAttributes_t
  kReduceCompute = 2,                        // CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
};
constexpr size_t kWorkspaceBytes = 32u << 20;
// Tuning: rows range, heuristic results asked for, how many of them get split-K variants, timed
// runs per candidate, bytes written before each timed run (over the 50 MB L2 of an H100/H200).
constexpr int64_t kTuneMinRows = 9, kTuneMaxRows = 256;
constexpr int kTuneAlgos = 8, kTuneSplitBase = 2, kTuneReps = 2;
constexpr size_t kFlushBytes = 80u << 20;

struct Api {
  int (*create)(Handle*);
  int (*desc_create)(Desc*, int, int);
  int (*desc_set)(Desc, int, const void*, size_t);
  int (*layout_create)(Layout*, int, uint64_t, uint64_t, int64_t);
  int (*pref_create)(Pref*);
  int (*pref_set)(Pref, int, const void*, size_t);
  int (*pref_destroy)(Pref);
  int (*heuristic)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, Heuristic*, int*);
  int (*matmul)(Handle, Desc, const void*, const void*, Layout, const void*, Layout, const void*, const void*, Layout, void*,
                Layout, const Algo*, void*, size_t, cudaStream_t);
  // Optional (split-K variants while tuning; absent: only the heuristic's candidates).
  int (*algo_check)(Handle, Desc, Layout, Layout, Layout, Layout, const Algo*, Heuristic*) = nullptr;
  int (*config_get)(const Algo*, int, void*, size_t, size_t*) = nullptr;
  int (*config_set)(Algo*, int, const void*, size_t) = nullptr;
};

struct Plan {
  bool ok = false;
  Desc desc = nullptr;
  Layout a = nullptr, b = nullptr, c = nullptr;
  Algo algo{};
  size_t workspace = 0;
  bool tuned = false;  // timed (or not to be timed); false: the heuristic's choice, to time at an eager use
};

struct Lt {
  std::mutex mu;
  bool tried = false;
  bool ok = false;
  std::string why;
  Api api{};
  Handle handle = nullptr;
  void* workspace = nullptr;
  void* flush = nullptr;                   // kFlushBytes, taken at the first tuning
  cudaEvent_t ev[2 * kTuneReps] = {};
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, Plan> plans;
};

Lt& lt() {
  static Lt* l = new Lt();
  return *l;
}

template <typename F>
bool sym(void* lib, const char* name, F& f, std::string& why) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) why = std::string("libcublasLt lacks ") + name;
  return f != nullptr;
}

void open_locked(Lt& l) {
  if (l.tried) return;
  l.tried = true;
  std::vector<std::string> names;
  if (const char* p = std::getenv("MLXB_CUBLASLT_PATH")) names.push_back(p);
  for (const char* n : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13",
                        "/usr/local/cuda/lib64/libcublasLt.so.12", "/usr/local/cuda/lib64/libcublasLt.so"})
    names.push_back(n);
  void* lib = nullptr;
  std::string tried;
  for (auto& n : names) {
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  if (!lib) { l.why = "libcublasLt not found (tried " + tried + "; set MLXB_CUBLASLT_PATH)"; return; }
  Api& a = l.api;
  if (!sym(lib, "cublasLtCreate", a.create, l.why) || !sym(lib, "cublasLtMatmulDescCreate", a.desc_create, l.why) ||
      !sym(lib, "cublasLtMatmulDescSetAttribute", a.desc_set, l.why) ||
      !sym(lib, "cublasLtMatrixLayoutCreate", a.layout_create, l.why) ||
      !sym(lib, "cublasLtMatmulPreferenceCreate", a.pref_create, l.why) ||
      !sym(lib, "cublasLtMatmulPreferenceSetAttribute", a.pref_set, l.why) ||
      !sym(lib, "cublasLtMatmulPreferenceDestroy", a.pref_destroy, l.why) ||
      !sym(lib, "cublasLtMatmulAlgoGetHeuristic", a.heuristic, l.why) || !sym(lib, "cublasLtMatmul", a.matmul, l.why))
    return;
  a.algo_check = reinterpret_cast<decltype(a.algo_check)>(dlsym(lib, "cublasLtMatmulAlgoCheck"));
  a.config_get = reinterpret_cast<decltype(a.config_get)>(dlsym(lib, "cublasLtMatmulAlgoConfigGetAttribute"));
  a.config_set = reinterpret_cast<decltype(a.config_set)>(dlsym(lib, "cublasLtMatmulAlgoConfigSetAttribute"));
  if (a.create(&l.handle) != 0) { l.why = "cublasLtCreate failed"; return; }
  l.workspace = device_alloc(kWorkspaceBytes, "the cuBLASLt workspace");
  l.ok = true;
}

int cuda_type(DType d) { return d == DType::F32 ? kR32F : d == DType::BF16 ? kR16BF : kR16F; }

struct Candidate {
  Algo algo;
  size_t workspace;
  uint32_t split;
};

bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}

// Whether a plan of M rows is timed: few-row products, not switched off.
bool tune_rows(int64_t m) {
  static const bool off = env_is("MLXB_CUBLASLT_TUNE", "0");
  return !off && m >= kTuneMinRows && m <= kTuneMaxRows;
}

// The heuristic's first `want` results (valid ones, within the workspace).
std::vector<Candidate> heuristic_candidates(Lt& l, const Plan& p, int want) {
  Api& a = l.api;
  std::vector<Candidate> out;
  Pref pref = nullptr;
  if (a.pref_create(&pref) != 0) return out;
  size_t ws = kWorkspaceBytes;
  a.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof(ws));
  std::vector<Heuristic> h(static_cast<size_t>(want));
  int found = 0;
  int st = a.heuristic(l.handle, p.desc, p.a, p.b, p.c, p.c, pref, want, h.data(), &found);
  a.pref_destroy(pref);
  if (st != 0) return out;
  for (int i = 0; i < found && i < want; ++i) {
    if (h[static_cast<size_t>(i)].state != 0 || h[static_cast<size_t>(i)].workspace_size > kWorkspaceBytes) continue;
    uint32_t split = 1;
    if (a.config_get) {
      size_t written = 0;
      if (a.config_get(&h[static_cast<size_t>(i)].algo, kConfigSplitK, &split, sizeof(split), &written) != 0) split = 1;
    }
    out.push_back({h[static_cast<size_t>(i)].algo, h[static_cast<size_t>(i)].workspace_size, split});
  }
  return out;
}

// Split-K variants (2, 4, 8 pieces summed in f32) of the first unsplit candidates that
// cuBLASLt accepts for this problem.
void add_split_variants(Lt& l, const Plan& p, std::vector<Candidate>& c) {
  Api& a = l.api;
  if (!a.algo_check || !a.config_set) return;
  const size_t base = c.size();
  for (size_t i = 0; i < base && i < static_cast<size_t>(kTuneSplitBase); ++i) {
    if (c[i].split != 1) continue;
    for (uint32_t split : {2u, 4u, 8u}) {
      Candidate v = c[i];
      const uint32_t scheme = kReduceCompute;
      if (a.config_set(&v.algo, kConfigSplitK, &split, sizeof(split)) != 0 ||
          a.config_set(&v.algo, kConfigReduction, &scheme, sizeof(scheme)) != 0)
        continue;
      Heuristic r{};
      if (a.algo_check(l.handle, p.desc, p.a, p.b, p.c, p.c, &v.algo, &r) != 0 || r.workspace_size > kWorkspaceBytes) continue;
      v.workspace = r.workspace_size;
      v.split = split;
      c.push_back(v);
    }
  }
}

// Mean time in microseconds of one candidate (negative: it failed to run), each timed run after
// a write of kFlushBytes on the same stream.
float time_candidate(Lt& l, const Plan& p, const Candidate& c, const void* x, const void* w, void* y, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return l.api.matmul(l.handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &c.algo, l.workspace, c.workspace, stream);
  };
  if (run() != 0) return -1.0f;  // warm-up (also loads the kernel)
  for (int r = 0; r < kTuneReps; ++r) {
    if (cudaMemsetAsync(l.flush, r, kFlushBytes, stream) != cudaSuccess) return -1.0f;
    cudaEventRecord(l.ev[2 * r], stream);
    if (run() != 0) return -1.0f;
    cudaEventRecord(l.ev[2 * r + 1], stream);
  }
  if (cudaEventSynchronize(l.ev[2 * kTuneReps - 1]) != cudaSuccess) return -1.0f;
  float total = 0.0f;
  for (int r = 0; r < kTuneReps; ++r) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, l.ev[2 * r], l.ev[2 * r + 1]) != cudaSuccess) return -1.0f;
    total += ms;
  }
  return total * 1000.0f / kTuneReps;
}

// Times the candidates of `p` on the caller's (non-capturing) stream with the call's own
// operands (y is written; the caller's product overwrites it afterwards) and keeps the fastest.
void tune_plan(Lt& l, Plan& p, int64_t m, int64_t n, int64_t k, const void* x, const void* w, void* y, cudaStream_t stream) {
  p.tuned = true;
  std::vector<Candidate> c = heuristic_candidates(l, p, kTuneAlgos);
  add_split_variants(l, p, c);
  if (c.size() < 2) return;
  if (!l.flush) {
    if (cudaMalloc(&l.flush, kFlushBytes) != cudaSuccess) { cudaGetLastError(); l.flush = nullptr; return; }
    for (cudaEvent_t& e : l.ev)
      if (cudaEventCreate(&e) != cudaSuccess) { cudaGetLastError(); return; }
  }
  std::vector<float> us(c.size());
  for (size_t i = 0; i < c.size(); ++i) us[i] = time_candidate(l, p, c[i], x, w, y, stream);
  cudaGetLastError();  // a candidate's launch failure is that candidate's, not the caller's
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (us[i] > 0.0f && (us[best] <= 0.0f || us[i] < us[best])) best = i;
  if (us[best] <= 0.0f) return;
  const size_t pick = us[0] > 0.0f && us[0] <= us[best] * 1.03f ? 0 : best;
  p.algo = c[pick].algo;
  p.workspace = c[pick].workspace;
  static const bool log = env_is("MLXB_CUBLASLT_LOG", "1");
  if (log) {
    std::fprintf(stderr, "cublaslt tune M=%ld N=%ld K=%ld: heuristic %.1f us, kept #%zu of %zu (split %u) %.1f us;", (long)m, (long)n,
                 (long)k, us[0], pick, c.size(), c[pick].split, us[pick]);
    for (size_t i = 0; i < c.size(); ++i) std::fprintf(stderr, " %u:%.1f", c[i].split, us[i]);
    std::fprintf(stderr, "\n");
  }
}

Plan make_plan(Lt& l, int64_t m, int64_t n, int64_t k, DType dtype) {
  // Column-major view: Y'[N,M] = W'[K,N]^T · X'[K,M], with W' = w, X' = x, Y' = y as stored.
  Plan p;
  Api& a = l.api;
  int t = cuda_type(dtype);
  int op_t = kOpT, op_n = kOpN;
  if (a.desc_create(&p.desc, kComputeF32, kR32F) != 0) return p;
  a.desc_set(p.desc, kDescTransA, &op_t, sizeof(op_t));
  a.desc_set(p.desc, kDescTransB, &op_n, sizeof(op_n));
  if (a.layout_create(&p.a, t, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k) != 0 ||
      a.layout_create(&p.b, t, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k) != 0 ||
      a.layout_create(&p.c, t, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n) != 0)
    return p;
  Pref pref = nullptr;
  if (a.pref_create(&pref) != 0) return p;
  size_t ws = kWorkspaceBytes;
  a.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof(ws));
  Heuristic h{};
  int found = 0;
  int st = a.heuristic(l.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &h, &found);
  a.pref_destroy(pref);
  if (st != 0 || found < 1) return p;
  p.algo = h.algo;
  p.workspace = h.workspace_size;
  p.ok = true;
  p.tuned = !tune_rows(m);
  return p;
}
}  // namespace

bool cublaslt_available(std::string* why) {
  Lt& l = lt();
  std::lock_guard<std::mutex> lock(l.mu);
  open_locked(l);
  if (why) *why = l.why;
  return l.ok;
}

bool cublaslt_matmul(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType dtype, cudaStream_t stream) {
  Lt& l = lt();
  std::lock_guard<std::mutex> lock(l.mu);
  open_locked(l);
  if (!l.ok) return false;
  auto key = std::make_tuple(m, n, k, static_cast<int>(dtype));
  auto it = l.plans.find(key);
  if (it == l.plans.end()) it = l.plans.emplace(key, make_plan(l, m, n, k, dtype)).first;
  Plan& p = it->second;
  if (!p.ok) return false;
  if (!p.tuned) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) tune_plan(l, p, m, n, k, x, w, y, stream);
    else cudaGetLastError();
  }
  const float alpha = 1.0f, beta = 0.0f;
  int st = l.api.matmul(l.handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, l.workspace, p.workspace, stream);
  if (st != 0) fail(ErrorCode::kInternal, "cuBLASLt matmul failed with status " + std::to_string(st) + " (M=" + std::to_string(m) +
                                              ", N=" + std::to_string(n) + ", K=" + std::to_string(k) + ")");
  return true;
}

}  // namespace mlxb::cuda
