// A diagnostic for cuda_ops_check --stream-probe (not used by any op): how fast one SM can stream
// weights from memory by each of the three ways our kernels use, at the occupancies those kernels
// run at. It reads a [rows, cols] 16-bit matrix larger than L2 once per launch and reports GB/s:
// - ldg: each warp reads U 16-byte vectors per lane of one row, then the next row (registers);
// - tile: each warp reads 16-row tiles along K into registers in the shape a tensor-core GEMV's
//   fragments take: R rows per instruction (R = 8: 64 bytes of each row; R = 4: 128 bytes), U
//   pieces along the row per row group, so 16 / R x U 16-byte loads per lane in flight;
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
#include "backend/cuda/tma.cuh"

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

// 16-row tiles (warp w takes tiles w, w + warps, ..), each read over its whole row length: per
// step, lane l loads 16 bytes of rows (l / (32 / R)) + R i (i < 16 / R) at byte 16 (l % (32 / R))
// of each of the U pieces of 512 / R bytes that the step covers.
template <int R, int U>
__global__ void probe_tile(const uint4* __restrict__ m, int64_t rows, int64_t vecs_per_row, uint32_t* sink) {
  constexpr int kLanesPerRow = 32 / R, kGroups = 16 / R;
  const int lane = threadIdx.x & 31, rr = lane / kLanesPerRow, c = lane % kLanesPerRow;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  uint32_t acc = 0;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); tile < rows / 16; tile += warps) {
    const uint4* base = m + (tile * 16 + rr) * vecs_per_row + c;
    for (int64_t v = 0; v < vecs_per_row; v += kLanesPerRow * U) {
      uint4 b[kGroups][U];
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
#pragma unroll
        for (int u = 0; u < U; ++u) b[i][u] = __ldg(base + static_cast<int64_t>(R * i) * vecs_per_row + v + kLanesPerRow * u);
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= b[i][u].x ^ b[i][u].w;
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

constexpr int kBoxCols = 64, kBoxRows = 128, kBoxBytes = kBoxCols * kBoxRows * 2;

// Block b takes the boxes b, b + grid, ... of the matrix in (row band, column) order.
template <int S>
__global__ void probe_tma(const __grid_constant__ CUtensorMap map, int64_t rows, int64_t cols, uint32_t* sink) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_1k(smem_raw);
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
    mbar_init_fence();
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
  // The probes that read into registers (one signature), reported in this order.
  struct RegProbe {
    const char* what;
    void (*k)(const uint4*, int64_t, int64_t, uint32_t*);
  };
  static const RegProbe kRegProbes[] = {
      {"ldg U=4 (regs)", probe_ldg<4>},
      {"ldg U=8 (regs)", probe_ldg<8>},
      {"tile 8 rows x 64 B, 4 in flight", probe_tile<8, 2>},
      {"tile 8 rows x 64 B, 8 in flight", probe_tile<8, 4>},
      {"tile 8 rows x 64 B, 16 in flight", probe_tile<8, 8>},
      {"tile 4 rows x 128 B, 8 in flight", probe_tile<4, 2>},
  };
  auto report = [&](const char* what, int blocks, int warps, double ms) {
    std::printf("stream %-34s blocks %4d x %2d warps (%5.1f warps/SM)  %7.1f us  %6.0f GB/s  %5.1f GB/s per SM\n", what, blocks, warps,
                static_cast<double>(blocks) * warps / sms, ms * 1e3, bytes / (ms * 1e-3) / 1e9, bytes / (ms * 1e-3) / 1e9 / sms);
  };
  for (int per_sm : {1, 2, 4}) {
    for (int warps : {4, 8}) {
      const int blocks = sms * per_sm;
      for (const auto& p : kRegProbes) {
        report(p.what, blocks, warps, time_launches([&] {
                 p.k<<<blocks, warps * 32, 0, stream()>>>(m.as<uint4>(), rows, cols / 8, sink.as<uint32_t>());
               }, 20));
      }
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
  CUtensorMap map;
  if (compute_major() < 9 || !encode_tma_2d(&map, m.p, true, rows, cols, cols, kBoxRows, kBoxCols)) {
    std::printf("stream tma: not available here\n");
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
