// Diagnostics of the cuBLASLt GEMM choice (cuda_ops_check --lt-sweep). Plain C++: the tools that
// call it include no CUDA headers, and a build without nvcc links the stub (stub.cc), which fails.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace mlxb::cuda {

// Times up to `count` of the heuristic's algorithms for row-major y[M,N] = x[M,K] · w[N,K]^T
// (rotating over `copies` weight copies so that repeated runs miss L2), and split-K variants of
// the first four, `iters` launches each on the default stream; prints a line per candidate and a
// last line `pick MxNxK=index/splitk/reduction` naming the fastest, the syntax of
// MLXB_CUBLASLT_PICK. With `enumerate`, also every configuration by algorithm id that cuBLASLt
// accepts for the shape (briefly timed, the 12 fastest again), then `pickall MxNxK=@...`.
void cublaslt_sweep(int64_t m, int64_t n, int64_t k, DType dtype, const void* x, const void* const* w, int copies, void* y,
                    int count, int iters, bool enumerate = false);

}  // namespace mlxb::cuda
