// The CPU backend: the reference implementation of every op. Each op lives in its own file
// (matmul.cc, rms_norm.cc, ...) with a plain reference loop and, where it pays, threaded SIMD
// paths chosen at run time from cpu_features() (files *_avx2.cc / *_avx512.cc).
#pragma once
#include "ops/ops.h"

namespace mlxb::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCPU; }
  void* alloc(int64_t bytes) override;
  void free(void* p) override;
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, int64_t bytes) override;
  void zero(void* p, int64_t bytes) override;
  void synchronize() override {}

  Tensor prepare_weight(const Tensor& w) override;  // weight_layout.cc
  QuantWeight prepare_qweight(const QuantWeight& w) override;  // qweight_layout.cc
  Tensor prepared_rows(const Tensor& prepared, int64_t r0, int64_t r1) override;  // weight_layout.cc
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
};

}  // namespace mlxb::cpu
