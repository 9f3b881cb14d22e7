// Host memory for model weights that decode streams once per token (weight_memory.cc).
#pragma once
#include <string>

#include "core/tensor.h"

namespace mlxb {

// An uninitialised host tensor. From 2 MiB up it is 2 MiB aligned and marked MADV_HUGEPAGE
// (transparent huge pages are often in "madvise" mode): with 4 KiB pages a streamed weight takes a
// TLB miss every 4 KiB and the hardware prefetcher stops at each page boundary. Smaller tensors
// use ordinary 64-byte aligned memory. kOutOfMemory naming `name` when the allocation fails.
Tensor weight_memory(const Shape& shape, DType dtype, const std::string& name);

}  // namespace mlxb
