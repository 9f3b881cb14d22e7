// Shared device helpers of the CUDA backend: error checks that throw typed mlxb::Error, element
// load/store in f32 for every activation dtype, dtype dispatch, launch geometry. Kernels live in
// the per-op .cu files; nothing here launches anything.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace mlxb::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what);

#define MLXB_CUDA_OK(expr)                                   \
  do {                                                       \
    cudaError_t mlxb_e_ = (expr);                            \
    if (mlxb_e_ != cudaSuccess) ::mlxb::cuda::throw_cuda(mlxb_e_, #expr); \
  } while (0)

// After a launch: a bad configuration surfaces here, not at the next sync.
#define MLXB_CUDA_LAUNCHED(name) MLXB_CUDA_OK(cudaGetLastError())

// The stream every op and copy is queued on: the backend's one stream, or while the calling
// thread captures a graph (graph.cu), its capture stream.
cudaStream_t stream();
cudaStream_t main_stream();
void set_capture_stream(cudaStream_t s);  // nullptr: back to the main stream
int sm_count();
int max_smem_optin();  // bytes of shared memory one block may opt into
int compute_major();   // the device's compute capability (major)
// kSyncCounters device ints, zero at rest: a kernel whose last block finishes the work of the
// others counts its finished blocks in them and resets its counters before it exits. Kernels on
// the one stream run in order, so each may use counters [0, its blocks).
constexpr int64_t kSyncCounters = 1 << 16;
int* sync_counters();
// Programmatic dependent launch (Hopper and later; MLXB_CUDA_PDL=0 turns it off): the fused
// decode GEMVs are launched so that they may start while the kernel before them runs; they load
// weights first and wait for it (grid_dependency_wait) before touching anything it writes.
bool programmatic_launch();
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The small kernels between the GEMVs / GEMMs -- rms_norm / add_rms_norm, rope_kv_write, the gated
// activation of a [gate; up] product, the paged split attention, the one-row decode attention --
// are launched programmatically too (off wherever programmatic_launch() is; MLXB_CUDA_PDL_OPS=0:
// none, or a list of the kinds to launch so: norm, rope, act, paged, attn).
// Each calls grid_dependents_may_launch() first and grid_dependency_wait() in every block before
// it reads anything a kernel before it may write (the attention kernels first load keys older
// than the step's), so a chain of such launches stays ordered.
bool programmatic_ops(const char* kind);

// kernel<<<grid, block, smem, stream()>>>(args...), with programmatic stream serialization when
// `programmatic` (the kernel must then wait as above).
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, bool programmatic, A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  MLXB_CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

// Device memory from the caching allocator (allocator.cu). Released when the guard dies.
void* device_alloc(int64_t bytes, const char* what);
void device_free(void* p);
// While a thread captures a graph its allocations come from an arena (allocator.cu): blocks
// freed during the capture are reused within it, and all of it is released with the graph.
struct Arena;
Arena* arena_create();
void arena_destroy(Arena* a);        // the graph using it must be destroyed first
void set_thread_arena(Arena* a);     // nullptr: back to the caching pool
struct Scratch {
  void* p = nullptr;
  Scratch(int64_t bytes, const char* what) : p(device_alloc(bytes, what)) {}
  ~Scratch() { device_free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

// Element access in float32 whatever the storage type.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// 8 consecutive elements as floats from a 16-byte aligned address (two loads for f32).
__device__ __forceinline__ void load8(const float* p, float* v) {
  float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* v) {
  uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) { float2 f = __bfloat1622float2(h[i]); v[2 * i] = f.x; v[2 * i + 1] = f.y; }
}
__device__ __forceinline__ void load8(const __half* p, float* v) {
  uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) { float2 f = __half22float2(h[i]); v[2 * i] = f.x; v[2 * i + 1] = f.y; }
}

// The rotation of a rope pair (a, b) by (cos c, sin s) with explicit roundings, so that every
// kernel that rotates (rope.cu, gemv_fused.cu) gets the same bits whatever the compiler fuses.
__device__ __forceinline__ float rope_lo(float a, float b, float c, float s) { return __fmaf_rn(a, c, -__fmul_rn(b, s)); }
__device__ __forceinline__ float rope_hi(float a, float b, float c, float s) { return __fmaf_rn(b, c, __fmul_rn(a, s)); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element grid for n items: capped so huge tensors loop (grid-stride) instead of overflowing.
inline unsigned grid_for(int64_t n, int threads = 256) {
  int64_t g = ceil_div(n, threads);
  int64_t cap = static_cast<int64_t>(sm_count()) * 32;
  return static_cast<unsigned>(g < 1 ? 1 : (g > cap ? cap : g));
}

void check_float(const Tensor& t, const char* op, const char* name);
void check_device(const Tensor& t, const char* op, const char* name);
void check_contiguous(const Tensor& t, const char* op, const char* name);
// [T, H, D] with contiguous heads and any row stride that keeps rows apart (e.g. a column range of
// a fused projection).
bool rows_dense(const Tensor& x);

}  // namespace mlxb::cuda

// Calls F.template operator()<T>() with T the C++ element type of a float dtype.
#define MLXB_FLOAT_SWITCH(dtype, T, ...)                                          \
  switch (dtype) {                                                               \
    case ::mlxb::DType::F32: { using T = float; __VA_ARGS__; break; }            \
    case ::mlxb::DType::BF16: { using T = __nv_bfloat16; __VA_ARGS__; break; }   \
    case ::mlxb::DType::F16: { using T = __half; __VA_ARGS__; break; }           \
    default: ::mlxb::fail(::mlxb::ErrorCode::kUnsupported, std::string("cuda: unsupported dtype ") + ::mlxb::dtype_name(dtype)); \
  }
