// A diagnostic for cuda_ops_check --stream-probe (not used by any op): how fast one SM can stream
// weights from memory by each of the three ways our kernels use, at the occupancies those kernels
// run at. It reads a [rows, cols] 16-bit matrix larger than L2 once per launch and reports GB/s:
// - ldg: each warp reads U 16-byte vectors per lane of one row, then the next row (registers);
// - cpasync: each warp keeps a ring of S pieces of 8 rows x 64 bytes in flight with 16-byte
//   cp.async (the piece shape of matmul_rows.cu);
// - tma: one thread per block keeps S boxes of 128 rows x 64 values in flight with 2-D tensor
//   copies (cp.async.bulk.tensor, 128-byte swizzle) completing on mbarriers.
// Every kernel folds a word of each piece into a sum written to `sink`, so nothing is elided.
#include <cuda.h>

#include <cstdio>
#include <functional>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/smem_copy.cuh"
#include "backend/cuda/stream_probe.h"

namespace mlxb::cuda {

namespace {

template <int U>
__global__ void probe_ldg(const uint4* __restrict__ m, int64_t rows, int64_t vecs_per_row, uint32_t* sink) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  uint32_t acc = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const uint4* row = m + r * vecs_per_row;
    for (int64_t v = lane; v < vecs_per_row; v += 32 * U) {
      uint4 b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) b[u] = v + 32 * u < vecs_per_row ? __ldg(row + v + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= b[u].x ^ b[u].w;
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Pieces of 8 rows x 64 bytes: lane (g, t) copies 16 bytes of row g at byte 16t of the piece.
// A warp walks 8-row groups; within a group, pieces along the row.
template <int S>
__global__ void probe_cpasync(const uint16_t* __restrict__ m, int64_t rows, int64_t cols, uint32_t* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * S * 32 + lane;
  const int64_t pieces_per_group = cols / 32, groups = rows / 8;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  const int64_t mine = first < groups ? (groups - first + warps - 1) / warps * pieces_per_group : 0;
  auto issue = [&](int64_t i) {
    if (i < mine) {
      const int64_t grp = first + (i / pieces_per_group) * warps, p = i % pieces_per_group;
      cp_async16(ring + (i % S) * 32, m + (grp * 8 + g) * cols + p * 32 + 8 * t, 16);
    }
    cp_async_commit();
  };
  for (int i = 0; i < S - 1; ++i) issue(i);
  uint32_t acc = 0;
  for (int64_t i = 0; i < mine; ++i) {
    cp_async_wait<S - 2>();
    const uint4 v = ring[(i % S) * 32];
    acc ^= v.x ^ v.w;
    issue(i + S - 1);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Tensor copies and mbarrier transactions are sm_90+; the other targets compile them out (the
// host side never launches the TMA probe there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MLXB_PROBE_SM90(...)
#else
#define MLXB_PROBE_SM90(...) __VA_ARGS__
#endif
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  MLXB_PROBE_SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count)));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, uint32_t bytes) {
  MLXB_PROBE_SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  MLXB_PROBE_SM90(asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory"));
}
__device__ __forceinline__ void tma_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  MLXB_PROBE_SM90(asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory"));
}

constexpr int kBoxCols = 64, kBoxRows = 128, kBoxBytes = kBoxCols * kBoxRows * 2;

// Block b takes the boxes b, b + grid, ... of the matrix in (row band, column) order.
template <int S>
__global__ void probe_tma(const __grid_constant__ CUtensorMap map, int64_t rows, int64_t cols, uint32_t* sink) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // 128-byte swizzle: 1 KB aligned
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * kBoxBytes);
  const int64_t per_band = cols / kBoxCols, boxes = rows / kBoxRows * per_band;
  const int64_t mine = blockIdx.x < boxes ? (boxes - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto issue = [&](int64_t i) {
    if (i >= mine) return;
    const int64_t b = blockIdx.x + i * gridDim.x;
    mbar_expect(full + i % S, kBoxBytes);
    tma_2d(smem + (i % S) * kBoxBytes, &map, static_cast<int>((b % per_band) * kBoxCols), static_cast<int>((b / per_band) * kBoxRows),
           full + i % S);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(full + s, 1);
    MLXB_PROBE_SM90(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 0; i < S; ++i) issue(i);
  uint32_t acc = 0;
  for (int64_t i = 0; i < mine; ++i) {
    mbar_wait(full + i % S, static_cast<uint32_t>((i / S) & 1));
    acc ^= reinterpret_cast<const uint32_t*>(smem + (i % S) * kBoxBytes)[threadIdx.x * 4];
    __syncthreads();  // every thread has read the slot: refill it
    if (threadIdx.x == 0) issue(i + S);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

double time_launches(const std::function<void()>& f, int iters) {
  cudaEvent_t a, b;
  MLXB_CUDA_OK(cudaEventCreate(&a));
  MLXB_CUDA_OK(cudaEventCreate(&b));
  f();
  MLXB_CUDA_OK(cudaEventRecord(a, stream()));
  for (int i = 0; i < iters; ++i) f();
  MLXB_CUDA_OK(cudaEventRecord(b, stream()));
  MLXB_CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  MLXB_CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

}  // namespace

void stream_probe() {
  const int64_t rows = 28672, cols = 4096;  // the 8B gate+up weight: 235 MB of bf16
  const int64_t bytes = rows * cols * 2;
  Scratch m(bytes, "the stream probe matrix"), sink(64, "the stream probe sink");
  MLXB_CUDA_OK(cudaMemsetAsync(m.p, 1, bytes, stream()));
  const int sms = sm_count();
  auto report = [&](const char* what, int blocks, int warps, double ms) {
    std::printf("stream %-34s blocks %4d x %2d warps (%5.1f warps/SM)  %7.1f us  %6.0f GB/s  %5.1f GB/s per SM\n", what, blocks, warps,
                static_cast<double>(blocks) * warps / sms, ms * 1e3, bytes / (ms * 1e-3) / 1e9, bytes / (ms * 1e-3) / 1e9 / sms);
  };
  for (int per_sm : {1, 2, 4}) {
    for (int warps : {4, 8}) {
      const int blocks = sms * per_sm;
      report("ldg U=4 (regs)", blocks, warps, time_launches([&] {
               probe_ldg<4><<<blocks, warps * 32, 0, stream()>>>(m.as<uint4>(), rows, cols / 8, sink.as<uint32_t>());
             }, 20));
      report("ldg U=8 (regs)", blocks, warps, time_launches([&] {
               probe_ldg<8><<<blocks, warps * 32, 0, stream()>>>(m.as<uint4>(), rows, cols / 8, sink.as<uint32_t>());
             }, 20));
      for (int s : {4, 8}) {
        const size_t sm_bytes = static_cast<size_t>(warps) * s * 512;
        auto k = s == 4 ? probe_cpasync<4> : probe_cpasync<8>;
        MLXB_CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm_bytes)));
        report(s == 4 ? "cpasync 8 rows x 64 B, ring 4" : "cpasync 8 rows x 64 B, ring 8", blocks, warps, time_launches([&] {
                 k<<<blocks, warps * 32, sm_bytes, stream()>>>(static_cast<const uint16_t*>(m.p), rows, cols, sink.as<uint32_t>());
               }, 20));
      }
    }
  }
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (compute_major() < 9 || cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      !fn) {
    std::printf("stream tma: not available here\n");
    return;
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * 2)};
  const cuuint32_t box[2] = {kBoxCols, kBoxRows}, estr[2] = {1, 1};
  const CUresult r = reinterpret_cast<EncodeTiled>(fn)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, m.p, dims, strides, box, estr,
                                                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("stream tma: cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(r));
    return;
  }
  for (int per_sm : {1, 2}) {
    for (int s : {2, 4, 6}) {
      const int blocks = sms * per_sm;
      const size_t sm_bytes = static_cast<size_t>(s) * kBoxBytes + 64 + 1024;
      if (per_sm * sm_bytes > 220 * 1024) continue;
      auto k = s == 2 ? probe_tma<2> : s == 4 ? probe_tma<4> : probe_tma<6>;
      MLXB_CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm_bytes)));
      char what[64];
      std::snprintf(what, sizeof what, "tma 128 x 64 boxes (16 KB), ring %d", s);
      report(what, blocks, 4, time_launches([&] {
               k<<<blocks, 128, sm_bytes, stream()>>>(map, rows, cols, sink.as<uint32_t>());
             }, 20));
    }
  }
  MLXB_CUDA_LAUNCHED("stream probe");
}

}  // namespace mlxb::cuda
