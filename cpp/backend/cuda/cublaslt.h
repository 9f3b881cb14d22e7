// cuBLASLt, opened with dlopen at first use so that the addon builds and loads where only nvcc
// and the static CUDA runtime exist. We declare the handful of entry points and enum values we
// use ourselves (values from the public cublasLt.h ABI, stable since CUDA 11).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace mlxb::cuda {

// Whether libcublasLt could be opened (searched: $MLXB_CUBLASLT_PATH, libcublasLt.so.13,
// libcublasLt.so.12, libcublasLt.so, then the CUDA toolkit's lib64). `why` says what failed.
bool cublaslt_available(std::string* why = nullptr);

// Row-major y[M,N] = x[M,K] · w[N,K]^T on `stream`, f32 accumulation. x, w and y of one dtype
// (f32, bf16 or f16). Returns false when cuBLASLt is missing or has no algorithm for the case
// (the caller then uses its own kernels); throws on a failure inside cuBLASLt. `accumulate`:
// y += x · w^T instead (beta = 1; the float32 sum rounded once).
bool cublaslt_matmul(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType dtype, cudaStream_t stream,
                     bool accumulate = false);

}  // namespace mlxb::cuda
