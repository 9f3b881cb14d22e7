// TEMPORARY: ops not yet implemented on the CPU. Each one moves to its own file (matmul.cc, ...)
// and leaves this file; the file is deleted when empty.
#include "backend/cpu/backend.h"

namespace mlxb::cpu {

[[noreturn]] static void todo(const char* op) { fail(ErrorCode::kInternal, std::string("cpu op not implemented yet: ") + op); }

void CpuBackend::qmatmul(const Tensor&, const QuantWeight&, const Tensor*, Tensor&) { todo("qmatmul"); }
void CpuBackend::qembedding(const QuantWeight&, const Tensor&, float, Tensor&) { todo("qembedding"); }

}  // namespace mlxb::cpu
