// cuBLASLt through dlopen (see cublaslt.h). Descriptors and the chosen algorithm are cached per
// (M, N, K, dtype); one workspace of 32 MiB serves every call (all calls share one stream).
#include "backend/cuda/cublaslt.h"

#include <dlfcn.h>

#include <cstdlib>
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
  if (a.create(&l.handle) != 0) { l.why = "cublasLtCreate failed"; return; }
  l.workspace = device_alloc(kWorkspaceBytes, "the cuBLASLt workspace");
  l.ok = true;
}

int cuda_type(DType d) { return d == DType::F32 ? kR32F : d == DType::BF16 ? kR16BF : kR16F; }

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
  const Plan& p = it->second;
  if (!p.ok) return false;
  const float alpha = 1.0f, beta = 0.0f;
  int st = l.api.matmul(l.handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, l.workspace, p.workspace, stream);
  if (st != 0) fail(ErrorCode::kInternal, "cuBLASLt matmul failed with status " + std::to_string(st) + " (M=" + std::to_string(m) +
                                              ", N=" + std::to_string(n) + ", K=" + std::to_string(k) + ")");
  return true;
}

}  // namespace mlxb::cuda
