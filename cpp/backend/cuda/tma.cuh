// Tensor-memory-access helpers (sm_90+): mbarrier transactions and 2-D tensor copies into shared
// memory, and the host side that encodes a tensor map (cuTensorMapEncodeTiled, reached through
// the runtime's driver entry point, so nothing links libcuda). Other targets compile the device
// helpers out; callers check compute_major() >= 9 before launching kernels that use them.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "backend/cuda/smem_copy.cuh"

namespace mlxb::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MLXB_SM90(...)
#else
#define MLXB_SM90(...) __VA_ARGS__
#endif

// The first 1 KB boundary at or after p (128-byte-swizzled boxes must start on one).
__device__ __forceinline__ unsigned char* align_1k(unsigned char* p) { return p + ((1024 - (smem_addr(p) & 1023)) & 1023); }

__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  MLXB_SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count)));
}
__device__ __forceinline__ void mbar_init_fence() {
  MLXB_SM90(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
}
// One arrival (no transaction bytes) on b, e.g. a consumer releasing a ring slot.
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  MLXB_SM90(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory"));
}
// Orders this thread's earlier shared-memory accesses before later tensor copies into them.
__device__ __forceinline__ void fence_proxy_async() { MLXB_SM90(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory")); }
__device__ __forceinline__ void mbar_expect(uint64_t* b, uint32_t bytes) {
  MLXB_SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory"));
}
// One poll of b's phase `parity` (the hardware may suspend the thread a while inside it).
__device__ __forceinline__ bool mbar_try(uint64_t* b, uint32_t parity) {
  uint32_t done = 1;
  MLXB_SM90(asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done)
                         : "r"(smem_addr(b)), "r"(parity)
                         : "memory"));
  return done != 0;
}
// Waits for b's phase `parity`. A phase that never completes (a copy's byte count that does not
// match the expect_tx, a lost arrival) traps after ~10 s of wall time instead of hanging the process:
// the launch then fails with a CUDA error the host reports. The clock is read only once a poll fails.
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  if (mbar_try(b, parity)) return;
  uint64_t t0 = 0, now = 0;
  MLXB_SM90(asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t0)));
  while (!mbar_try(b, parity)) {
    MLXB_SM90(asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now)));
    if (now - t0 > 10'000'000'000ull) __trap();
  }
}
// Box (c0 = innermost coordinate, c1) of `map` into dst, completing `bytes` on bar.
__device__ __forceinline__ void tma_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  MLXB_SM90(asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory"));
}

// A row-major [rows, cols] 16-bit matrix (row stride `ld` elements) as a tensor map with boxes of
// box_rows x box_cols and the 128-byte swizzle (box_cols * 2 must be 128). False when the driver
// has no encoder or refuses the layout.
bool encode_tma_2d(CUtensorMap* map, const void* base, bool bf16, int64_t rows, int64_t cols, int64_t ld, int box_rows, int box_cols);
// The general form: elements of `type` (elem_bytes each), row stride ld_bytes, the 128-byte swizzle
// when `swizzle` (box_cols * elem_bytes must then be 128), else none (a multiple of 16 bytes).
bool encode_tma_2d_raw(CUtensorMap* map, const void* base, CUtensorMapDataType type, int elem_bytes, int64_t rows, int64_t cols,
                       int64_t ld_bytes, int box_rows, int box_cols, bool swizzle);

}  // namespace mlxb::cuda
