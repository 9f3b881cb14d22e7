// attention: out[t, h, :] = softmax_s(mask(softcap(scale * q[t,h]·k[h/g, s]))) · v[h/g, s, :]
// q [T, Hq, D] float32; k [Hkv, S, D], v [Hkv, S, Dv] (f32/bf16/f16, dim-0 stride >= S*D so cache
// views work); q_pos i32 [T]; k_pos i32 [S]. A key s is visible to query t when k_pos[s] >= 0
// (slot filled), and, if causal, k_pos[s] <= q_pos[t], and, if window > 0,
// q_pos[t] - k_pos[s] < window. Order as in Hugging Face eager attention: scale, then soft-cap,
// then mask, then softmax in float32. A query that sees no key gets zeros.
#include <cmath>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

namespace {

void check_cache(const char* op, const char* name, const Tensor& t, int64_t s) {
  check_host(op, name, t, false);
  check_float(op, name, t);
  MLXB_ARG(t.ndim() == 3 && t.dim(1) == s, op, std::string(name) + " must be [Hkv, S, D], got " + t.describe());
  MLXB_ARG(t.stride(2) == 1 && t.stride(1) == t.dim(2) && t.stride(0) >= s * t.dim(2), op,
          std::string(name) + " must have contiguous rows and dim-0 stride >= S*D");
}

}  // namespace

void attention_reference(const AttentionView& a) {
  parallel_for(a.t * a.hq, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> sc(static_cast<size_t>(a.s)), kr(static_cast<size_t>(a.d)), vr(static_cast<size_t>(a.dv));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / a.hq, h = i % a.hq, hk = h / (a.hq / a.hkv);
      const float* q = a.q + (t * a.hq + h) * a.d;
      float* o = a.out + (t * a.hq + h) * a.dv;
      const int32_t qp = a.q_pos[t];
      float mx = -INFINITY;
      for (int64_t s = 0; s < a.s; ++s) {
        if (!a.visible(qp, a.k_pos[s])) { sc[s] = -INFINITY; continue; }
        row_to_f32(a.k + (hk * a.k_stride0 + s * a.d) * a.k_elem, a.kv_dtype, a.d, kr.data());
        float dot = 0.0f;
        for (int64_t j = 0; j < a.d; ++j) dot += q[j] * kr[j];
        float v = dot * a.scale;
        if (a.softcap > 0.0f) v = a.softcap * std::tanh(v / a.softcap);
        sc[s] = v;
        mx = v > mx ? v : mx;
      }
      for (int64_t j = 0; j < a.dv; ++j) o[j] = 0.0f;
      if (mx == -INFINITY) continue;
      float sum = 0.0f;
      for (int64_t s = 0; s < a.s; ++s) {
        sc[s] = sc[s] == -INFINITY ? 0.0f : std::exp(sc[s] - mx);
        sum += sc[s];
      }
      const float inv = 1.0f / sum;
      for (int64_t s = 0; s < a.s; ++s) {
        if (sc[s] == 0.0f) continue;
        const float p = sc[s] * inv;
        row_to_f32(a.v + (hk * a.v_stride0 + s * a.dv) * a.k_elem, a.kv_dtype, a.dv, vr.data());
        for (int64_t j = 0; j < a.dv; ++j) o[j] += p * vr[j];
      }
    }
  });
}

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                           const AttentionArgs& args, Tensor& out) {
  const char* op = "attention";
  check_host(op, "q", q);
  check_host(op, "out", out);
  check_host(op, "q_pos", q_pos);
  check_host(op, "k_pos", k_pos);
  check_dtype(op, "q", q, DType::F32);
  check_dtype(op, "out", out, DType::F32);
  check_dtype(op, "q_pos", q_pos, DType::I32);
  check_dtype(op, "k_pos", k_pos, DType::I32);
  MLXB_ARG(q.ndim() == 3, op, "q must be [T, Hq, D], got " + q.describe());
  MLXB_ARG(k.defined() && k.ndim() == 3, op, "k must be [Hkv, S, D]");
  const int64_t s = k.dim(1);
  check_cache(op, "k", k, s);
  check_cache(op, "v", v, s);
  MLXB_ARG(k.dtype() == v.dtype(), op, "k and v must share a dtype");
  AttentionView a;
  a.t = q.dim(0);
  a.hq = q.dim(1);
  a.d = q.dim(2);
  a.hkv = k.dim(0);
  a.s = s;
  a.dv = v.dim(2);
  MLXB_ARG(k.dim(2) == a.d, op, "k's head dim must equal q's: " + k.describe() + " vs " + q.describe());
  MLXB_ARG(v.dim(0) == a.hkv, op, "k and v must have the same number of heads");
  MLXB_ARG(a.hkv > 0 && a.hq % a.hkv == 0, op, "query heads must be a multiple of key/value heads");
  MLXB_ARG(out.ndim() == 3 && out.dim(0) == a.t && out.dim(1) == a.hq && out.dim(2) == a.dv, op,
          "out must be [T, Hq, Dv], got " + out.describe());
  MLXB_ARG(q_pos.numel() == a.t, op, "q_pos must have T entries, got " + q_pos.describe());
  MLXB_ARG(k_pos.numel() == s, op, "k_pos must have S entries, got " + k_pos.describe());
  MLXB_ARG(args.softcap >= 0.0f && args.window >= 0, op, "softcap and window must be >= 0");
  a.q = q.ptr<float>();
  a.k = static_cast<const char*>(k.data());
  a.v = static_cast<const char*>(v.data());
  a.kv_dtype = k.dtype();
  a.k_elem = dtype_size(k.dtype());
  a.k_stride0 = k.stride(0);
  a.v_stride0 = v.stride(0);
  a.q_pos = q_pos.ptr<int32_t>();
  a.k_pos = k_pos.ptr<int32_t>();
  a.scale = args.scale;
  a.softcap = args.softcap;
  a.window = args.window;
  a.causal = args.causal;
  a.out = out.ptr<float>();
  if (a.t == 0 || a.hq == 0 || a.dv == 0) return;
  attention_dispatch(a);
}

}  // namespace mlxb::cpu
