// TEMPORARY: ops not yet implemented on the CPU. Each one moves to its own file (matmul.cc, ...)
// and leaves this file; the file is deleted when empty.
#include "backend/cpu/backend.h"

namespace mlxb::cpu {

[[noreturn]] static void todo(const char* op) { fail(ErrorCode::kInternal, std::string("cpu op not implemented yet: ") + op); }

void CpuBackend::matmul(const Tensor&, const Tensor&, const Tensor*, Tensor&) { todo("matmul"); }
void CpuBackend::embedding(const Tensor&, const Tensor&, float, Tensor&) { todo("embedding"); }
void CpuBackend::rms_norm(const Tensor&, const Tensor&, float, bool, Tensor&) { todo("rms_norm"); }
void CpuBackend::layer_norm(const Tensor&, const Tensor&, const Tensor*, float, Tensor&) { todo("layer_norm"); }
void CpuBackend::rope(Tensor&, const Tensor&, const RopeArgs&) { todo("rope"); }
void CpuBackend::softmax(const Tensor&, Tensor&) { todo("softmax"); }
void CpuBackend::attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttentionArgs&, Tensor&) { todo("attention"); }
void CpuBackend::gated_act(const Tensor&, const Tensor&, Activation, Tensor&) { todo("gated_act"); }
void CpuBackend::add(const Tensor&, const Tensor&, Tensor&) { todo("add"); }
void CpuBackend::softcap(Tensor&, float) { todo("softcap"); }
void CpuBackend::kv_write(const Tensor&, const Tensor&, Tensor&) { todo("kv_write"); }
void CpuBackend::convert(const Tensor&, Tensor&) { todo("convert"); }

}  // namespace mlxb::cpu
