// The CUDA backend: one device (ordinal 0), one stream on which every op and copy is ordered,
// device memory from a caching allocator. Ops are implemented in the .cu file of the same stem
// as the CPU backend (matmul.cu, attention.cu, ...). Not thread-parallel: callers serialise work
// per model, and the stream orders it.
#pragma once
#include "ops/ops.h"

namespace mlxb::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  Device device() const override { return Device::kCUDA; }
  void* alloc(int64_t bytes) override;
  void free(void* p) override;
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, int64_t bytes) override;
  void zero(void* p, int64_t bytes) override;
  void synchronize() override;

  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) override;
  void qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out) override;
  void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y) override;
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) override;
  void rope(Tensor& x, const Tensor& positions, const RopeArgs& args) override;
  void softmax(const Tensor& x, Tensor& y) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const AttentionArgs& args, Tensor& out) override;
  void gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void softcap(Tensor& x, float cap) override;
  void kv_write(const Tensor& src, const Tensor& slots, Tensor& cache) override;
  void convert(const Tensor& src, Tensor& dst) override;
  void kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out) override;
  void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                       const AttentionArgs& args, Tensor& out) override;
  void add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y) override;
  void argmax(const Tensor& x, Tensor& out) override;
  void sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out) override;  // sample.cu
  void gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out) override;
  void qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out) override;
  void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args, const Tensor& slots,
                     Tensor& k_cache, Tensor& v_cache) override;
  void rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope,
                            const Tensor& slots, Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows,
                            const AttentionArgs& args, Tensor& out) override;  // paged_attention.cu
  void rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                                const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache) override;  // rope.cu
  void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid) override;                     // matmul.cu
  void rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out) override;  // matmul.cu
  // gemv_fused.cu
  void matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid) override;
  void norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act,
                         Tensor& out) override;
  void norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                     const Tensor& positions, const RopeArgs& rope, const Tensor& slots, Tensor& k_cache, Tensor& v_cache,
                     Tensor& qkv) override;
  // qgemv_fused.cu
  void qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid) override;
  void norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y) override;
  void norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act,
                          Tensor& out) override;
  int64_t read_later(const void* src, int64_t bytes) override;
  void read_wait(int64_t ticket, void* dst) override;
  bool begin_capture() override;                        // graph.cu
  std::unique_ptr<DeviceGraph> end_capture() override;  // graph.cu
  void abort_capture() override;                        // graph.cu
};

}  // namespace mlxb::cuda
