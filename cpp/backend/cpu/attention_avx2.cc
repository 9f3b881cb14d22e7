// AVX2 attention (compiled with -mavx2 -mfma -mf16c). One work item is (query t, kv head):
// the query heads sharing that kv head are served together, so each key/value row is read once
// per item. Visibility depends only on (q_pos, k_pos), so the visible slots are listed once per
// item; scores are 4-key dot products, softmax uses a vector exp, and the value rows are
// accumulated with FMA. Same math as attention_reference, different summation order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_avx2.h"
#include "core/thread_pool.h"

namespace mlxb::cpu::avx2 {
namespace {

// Four dot products of q with k rows k0..k3 (length d), as one __m128.
template <DType T>
inline __m128 dot4(const float* q, const char* k0, const char* k1, const char* k2, const char* k3, int64_t d) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t d8 = d & ~int64_t{7};
  for (int64_t j = 0; j < d8; j += 8) {
    const __m256 qv = _mm256_loadu_ps(q + j);
    a0 = _mm256_fmadd_ps(qv, load8<T>(k0, j), a0);
    a1 = _mm256_fmadd_ps(qv, load8<T>(k1, j), a1);
    a2 = _mm256_fmadd_ps(qv, load8<T>(k2, j), a2);
    a3 = _mm256_fmadd_ps(qv, load8<T>(k3, j), a3);
  }
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  if (d8 < d) {
    alignas(16) float t[4] = {0, 0, 0, 0};
    for (int64_t j = d8; j < d; ++j) {
      t[0] += q[j] * load1<T>(k0, j);
      t[1] += q[j] * load1<T>(k1, j);
      t[2] += q[j] * load1<T>(k2, j);
      t[3] += q[j] * load1<T>(k3, j);
    }
    r = _mm_add_ps(r, _mm_load_ps(t));
  }
  return r;
}

template <DType T>
inline float dot1(const float* q, const char* k, int64_t d) {
  __m256 a = _mm256_setzero_ps();
  const int64_t d8 = d & ~int64_t{7};
  for (int64_t j = 0; j < d8; j += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), load8<T>(k, j), a);
  float s = hsum(a);
  for (int64_t j = d8; j < d; ++j) s += q[j] * load1<T>(k, j);
  return s;
}

// o[0..n) += p * v[0..n)
template <DType T>
inline void axpy(float p, const char* v, float* o, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(o + j, _mm256_fmadd_ps(pv, load8<T>(v, j), _mm256_loadu_ps(o + j)));
  for (int64_t j = n8; j < n; ++j) o[j] += p * load1<T>(v, j);
}

template <DType T>
void attention_t(const AttentionView& a) {
  const int64_t g = a.hq / a.hkv;
  const int64_t es = dtype_size(T);
  parallel_for(a.t * a.hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<int32_t> vis(static_cast<size_t>(a.s));
    std::vector<float> sc(static_cast<size_t>(g * a.s) + 8);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / a.hkv, hk = item % a.hkv;
      const int32_t qp = a.q_pos[t];
      int64_t nv = 0;
      for (int64_t s = 0; s < a.s; ++s)
        if (a.visible(qp, a.k_pos[s])) vis[nv++] = static_cast<int32_t>(s);
      const char* kb = a.k + hk * a.k_stride0 * es;
      const char* vb = a.v + hk * a.v_stride0 * es;
      for (int64_t hh = 0; hh < g; ++hh) {
        const int64_t h = hk * g + hh;
        const float* q = a.q + (t * a.hq + h) * a.d;
        float* o = a.out + (t * a.hq + h) * a.dv;
        std::fill(o, o + a.dv, 0.0f);
        if (nv == 0) continue;
        float* srow = sc.data() + hh * a.s;
        int64_t j = 0;
        for (; j + 4 <= nv; j += 4) {
          const __m128 d4 = dot4<T>(q, kb + vis[j] * a.d * es, kb + vis[j + 1] * a.d * es, kb + vis[j + 2] * a.d * es,
                                    kb + vis[j + 3] * a.d * es, a.d);
          _mm_storeu_ps(srow + j, _mm_mul_ps(d4, _mm_set1_ps(a.scale)));
        }
        for (; j < nv; ++j) srow[j] = dot1<T>(q, kb + vis[j] * a.d * es, a.d) * a.scale;
        if (a.softcap > 0.0f)
          for (int64_t i = 0; i < nv; ++i) srow[i] = a.softcap * std::tanh(srow[i] / a.softcap);
        // softmax over the visible scores
        __m256 mv = _mm256_set1_ps(-INFINITY);
        const int64_t nv8 = nv & ~int64_t{7};
        for (int64_t i = 0; i < nv8; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(srow + i));
        float mx = hmax(mv);
        for (int64_t i = nv8; i < nv; ++i) mx = std::max(mx, srow[i]);
        const __m256 mxv = _mm256_set1_ps(mx);
        __m256 sv = _mm256_setzero_ps();
        for (int64_t i = 0; i < nv8; i += 8) {
          const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(srow + i), mxv));
          _mm256_storeu_ps(srow + i, e);
          sv = _mm256_add_ps(sv, e);
        }
        float sum = hsum(sv);
        for (int64_t i = nv8; i < nv; ++i) {
          srow[i] = std::exp(srow[i] - mx);
          sum += srow[i];
        }
        for (int64_t i = 0; i < nv; ++i) axpy<T>(srow[i], vb + vis[i] * a.dv * es, o, a.dv);
        const __m256 inv = _mm256_set1_ps(1.0f / sum);
        const int64_t dv8 = a.dv & ~int64_t{7};
        for (int64_t i = 0; i < dv8; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), inv));
        for (int64_t i = dv8; i < a.dv; ++i) o[i] *= 1.0f / sum;
      }
    }
  });
}

}  // namespace

void attention(const AttentionView& a) {
  switch (a.kv_dtype) {
    case DType::F32: attention_t<DType::F32>(a); return;
    case DType::BF16: attention_t<DType::BF16>(a); return;
    default: attention_t<DType::F16>(a); return;
  }
}

}  // namespace mlxb::cpu::avx2
