// cuBLASLt through dlopen (see cublaslt.h). Descriptors and the chosen algorithm are cached per
// (M, N, K, dtype); one workspace of 32 MiB serves every call (all calls share one stream).
#include "backend/cuda/cublaslt.h"
#include "backend/cuda/cublaslt_sweep.h"

#include <cuda_fp16.h>
#include <dlfcn.h>

#include <cmath>
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
  kConfigId = 0, kConfigTile = 1, kConfigSplitK = 2, kConfigReduction = 3, kConfigSwizzle = 4, kConfigCustom = 5,
  kConfigStages = 6,
};
constexpr size_t kWorkspaceBytes = 32u << 20;

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
  // Optional (diagnostics and MLXB_CUBLASLT_PICK): read / change an algorithm's configuration.
  int (*config_get)(const Algo*, int, void*, size_t, size_t*) = nullptr;
  int (*config_set)(Algo*, int, const void*, size_t) = nullptr;
};

struct Plan {
  bool ok = false;
  Desc desc = nullptr;
  Layout a = nullptr, b = nullptr, c = nullptr;
  Algo algo{};
  size_t workspace = 0;
};

struct Lt {
  std::mutex mu;
  bool tried = false;
  bool ok = false;
  std::string why;
  Api api{};
  Handle handle = nullptr;
  void* workspace = nullptr;
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
  a.config_get = reinterpret_cast<decltype(a.config_get)>(dlsym(lib, "cublasLtMatmulAlgoConfigGetAttribute"));
  a.config_set = reinterpret_cast<decltype(a.config_set)>(dlsym(lib, "cublasLtMatmulAlgoConfigSetAttribute"));
  if (a.create(&l.handle) != 0) { l.why = "cublasLtCreate failed"; return; }
  l.workspace = device_alloc(kWorkspaceBytes, "the cuBLASLt workspace");
  l.ok = true;
}

int cuda_type(DType d) { return d == DType::F32 ? kR32F : d == DType::BF16 ? kR16BF : kR16F; }

// The descriptors of one shape. Column-major view: Y'[N,M] = W'[K,N]^T · X'[K,M], with W' = w,
// X' = x, Y' = y as stored.
bool make_descs(Lt& l, int64_t m, int64_t n, int64_t k, DType dtype, Plan& p) {
  Api& a = l.api;
  int t = cuda_type(dtype);
  int op_t = kOpT, op_n = kOpN;
  if (a.desc_create(&p.desc, kComputeF32, kR32F) != 0) return false;
  a.desc_set(p.desc, kDescTransA, &op_t, sizeof(op_t));
  a.desc_set(p.desc, kDescTransB, &op_n, sizeof(op_n));
  return a.layout_create(&p.a, t, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k) == 0 &&
         a.layout_create(&p.b, t, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k) == 0 &&
         a.layout_create(&p.c, t, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n) == 0;
}

// Up to `count` of the heuristic's algorithms for p, best first.
std::vector<Heuristic> candidates(Lt& l, const Plan& p, int count) {
  Api& a = l.api;
  std::vector<Heuristic> out(static_cast<size_t>(count));
  Pref pref = nullptr;
  if (a.pref_create(&pref) != 0) return {};
  size_t ws = kWorkspaceBytes;
  a.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof(ws));
  int found = 0;
  int st = a.heuristic(l.handle, p.desc, p.a, p.b, p.c, p.c, pref, count, out.data(), &found);
  a.pref_destroy(pref);
  if (st != 0 || found < 1) return {};
  out.resize(static_cast<size_t>(found));
  return out;
}

// MLXB_CUBLASLT_PICK="MxNxK=index[/splitk[/reduction]],...": the heuristic's candidate `index`
// for that shape, optionally with another split-K count and reduction scheme (an experiment
// knob for cuda_ops_check --lt-sweep's findings; a pick that does not exist is ignored).
struct Pick { int index = 0; uint32_t splitk = 0, reduction = 0; };
bool pick_for(int64_t m, int64_t n, int64_t k, Pick& out) {
  const char* env = std::getenv("MLXB_CUBLASLT_PICK");
  if (!env) return false;
  const std::string want = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + "=";
  for (const char* s = env; (s = std::strstr(s, want.c_str())) != nullptr; s += want.size()) {
    if (s != env && s[-1] != ',') continue;
    unsigned idx = 0, sk = 0, red = 0;
    if (std::sscanf(s + want.size(), "%u/%u/%u", &idx, &sk, &red) < 1) return false;
    out.index = static_cast<int>(idx);
    out.splitk = sk;
    out.reduction = red;
    return true;
  }
  return false;
}

void set_split(Lt& l, Algo& algo, uint32_t splitk, uint32_t reduction) {
  if (!l.api.config_set || splitk == 0) return;
  l.api.config_set(&algo, kConfigSplitK, &splitk, sizeof(splitk));
  if (splitk > 1) l.api.config_set(&algo, kConfigReduction, &reduction, sizeof(reduction));
}

Plan make_plan(Lt& l, int64_t m, int64_t n, int64_t k, DType dtype) {
  Plan p;
  if (!make_descs(l, m, n, k, dtype, p)) return p;
  Pick pick;
  const bool picked = pick_for(m, n, k, pick);
  std::vector<Heuristic> hs = candidates(l, p, picked ? pick.index + 1 : 1);
  if (hs.empty()) return p;
  Heuristic h = hs[picked && pick.index < static_cast<int>(hs.size()) ? static_cast<size_t>(pick.index) : 0];
  if (picked) set_split(l, h.algo, pick.splitk, pick.reduction);
  p.algo = h.algo;
  p.workspace = picked ? kWorkspaceBytes : h.workspace_size;
  p.ok = true;
  return p;
}

uint32_t config_u32(Lt& l, const Algo& algo, int attr) {
  uint32_t v = 0;
  size_t got = 0;
  if (l.api.config_get) l.api.config_get(&algo, attr, &v, sizeof(v), &got);
  return v;
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
  const Plan& p = it->second;
  if (!p.ok) return false;
  const float alpha = 1.0f, beta = 0.0f;
  int st = l.api.matmul(l.handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, l.workspace, p.workspace, stream);
  if (st != 0) fail(ErrorCode::kInternal, "cuBLASLt matmul failed with status " + std::to_string(st) + " (M=" + std::to_string(m) +
                                              ", N=" + std::to_string(n) + ", K=" + std::to_string(k) + ")");
  return true;
}

// ---------------------------------------------------------------- diagnostics
void cublaslt_sweep(int64_t m, int64_t n, int64_t k, DType dtype, const void* x, const void* const* w, int copies, void* y,
                    int count, int iters) {
  Lt& l = lt();
  std::lock_guard<std::mutex> lock(l.mu);
  open_locked(l);
  if (!l.ok) fail(ErrorCode::kUnsupported, "cuBLASLt sweep: " + l.why);
  Plan p;
  if (!make_descs(l, m, n, k, dtype, p)) fail(ErrorCode::kInternal, "cuBLASLt sweep: descriptors");
  std::vector<Heuristic> hs = candidates(l, p, count);
  struct Try { int index; uint32_t splitk, reduction; };
  std::vector<Try> tries;
  for (int i = 0; i < static_cast<int>(hs.size()); ++i) tries.push_back({i, 0, 0});
  for (int i = 0; i < std::min<int>(4, static_cast<int>(hs.size())); ++i)
    for (uint32_t sk : {2u, 3u, 4u, 6u, 8u})
      for (uint32_t red : {1u, 2u, 4u}) tries.push_back({i, sk, red});
  const double bytes = static_cast<double>(n) * k * dtype_size(dtype);
  if (dtype == DType::F32) fail(ErrorCode::kUnsupported, "cuBLASLt sweep: 16-bit dtypes only");
  std::vector<uint16_t> got(static_cast<size_t>(m * n)), ref;
  auto to_float = [dtype](uint16_t v) {
    if (dtype == DType::BF16) {
      uint32_t u = static_cast<uint32_t>(v) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return static_cast<double>(f);
    }
    return static_cast<double>(__half2float(*reinterpret_cast<const __half*>(&v)));
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double best = 1e30;
  Try best_try{0, 0, 0};
  const float alpha = 1.0f, beta = 0.0f;
  for (const Try& t : tries) {
    Algo algo = hs[static_cast<size_t>(t.index)].algo;
    set_split(l, algo, t.splitk, t.reduction);
    auto run = [&](int i) {
      return l.api.matmul(l.handle, p.desc, &alpha, w[i % copies], p.a, x, p.b, &beta, y, p.c, y, p.c, &algo, l.workspace,
                          kWorkspaceBytes, nullptr);
    };
    if (run(0) != 0 || cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    // Its result against the first candidate's (the default): max |diff| / max |ref|.
    cudaMemcpy(got.data(), y, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    if (ref.empty()) ref = got;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double a = to_float(got[i]), b = to_float(ref[i]);
      diff = std::max(diff, std::abs(a - b));
      scale = std::max(scale, std::abs(b));
    }
    const double err = scale > 0 ? diff / scale : diff;
    cudaEventRecord(e0, nullptr);
    for (int i = 0; i < iters; ++i) run(i);
    cudaEventRecord(e1, nullptr);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const double us = 1e3 * ms / iters;
    if (us < best && err < 2e-2) { best = us; best_try = t; }
    std::printf("lt %ldx%ldx%ld cand %2d split %u red %u  algo %u tile %u stages %u swizzle %u custom %u splitk %u  %8.1f us  %6.0f GB/s  err %.1e\n",
                (long)m, (long)n, (long)k, t.index, t.splitk, t.reduction, config_u32(l, algo, kConfigId),
                config_u32(l, algo, kConfigTile), config_u32(l, algo, kConfigStages), config_u32(l, algo, kConfigSwizzle),
                config_u32(l, algo, kConfigCustom), config_u32(l, algo, kConfigSplitK), us, bytes / (us * 1e-6) / 1e9, err);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::printf("pick %ldx%ldx%ld=%d/%u/%u  %.1f us  %.0f GB/s\n", (long)m, (long)n, (long)k, best_try.index, best_try.splitk,
              best_try.reduction, best, bytes / (best * 1e-6) / 1e9);
}

}  // namespace mlxb::cuda
