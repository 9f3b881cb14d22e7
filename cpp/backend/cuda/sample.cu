// Backend::sample on the device: one block per row runs the whole chain of engine/sampler.h where
// the logits are, and only (token, status) pairs come back. Per row, over the vocabulary:
//   bias and penalties (into a float32 copy of the row, when the row has any), the maximum (NaN and
//   all -inf reported), then greedy -> the first maximum; otherwise the candidates z = (x - max) / T
//   > -80 with weight expf(z), and
//   - top-k: a radix select of the k-th logit (counts), the k best gathered and sorted by rank in
//     shared memory, top-p / min-p / the draw over them in rank order;
//   - else top-p: a radix select on the weights' bits (integer weights 2^44 w) finds the lowest
//     weight of the nucleus (ties to the lower id: a count-based cut in id order), then min-p and
//     the draw in id order (a running sum in id order, pieces first, then elements).
// No sort of the vocabulary and a single launch. Sums differ from the host's only in the order of
// summation (ties at that rounding may pick the neighbour); everything is in a fixed order, so a
// given input always gives the same token. The uniform comes from the host's generator.
#include <cfloat>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/sample_block.cuh"

namespace mlxb::cuda {

namespace {

using namespace sample_block;

constexpr double kFix = 17592186044416.0;  // 2^44: integer weight of a candidate of weight 1

struct DevArgs {
  long long row, top_k, special_at, n_special;
  double temperature, inv_t, top_p, min_p, rep, presence, frequency, uniform;
};

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }

__device__ __forceinline__ void finish(int32_t* out, int32_t token, int32_t status) {
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = token;
    out[2 * blockIdx.x + 1] = status;
  }
}

// The draw over the k best in rank order (m <= kThreads of them, sorted in sh.u.cand).
__device__ void draw_ranked(Shared& sh, const DevArgs& a, int m, double vmax, int32_t* out) {
  const int t = threadIdx.x;
  double w = 0;
  int32_t id = 0;
  if (t < m) {
    const unsigned long long c = sh.u.cand[t];
    id = static_cast<int32_t>(~static_cast<uint32_t>(c & 0xffffffffu));
    const double z = (static_cast<double>(unordered(static_cast<uint32_t>(c >> 32))) - vmax) * a.inv_t;
    w = static_cast<double>(expf(static_cast<float>(z)));
  }
  __syncthreads();
  bool kept = t < m;
  if (a.top_p < 1.0) {
    double total = 0;
    const double incl = scan<double>(sh, w, total);
    const double need = a.top_p * total;
    // The host keeps adding while the running sum is below need: t is kept when the sum before it is.
    sh.u.sub[t] = incl;
    __syncthreads();
    kept = kept && (t == 0 || sh.u.sub[t - 1] < need);
    __syncthreads();
  }
  if (a.min_p > 0) kept = kept && !(w < a.min_p);
  const double v = kept ? w : 0.0;
  double total = 0;
  const double incl = scan<double>(sh, v, total);
  const int n_kept = __syncthreads_count(kept);
  const double goal = a.uniform * total;
  if (t == 0) sh.pick_i = 0x7fffffff;
  __syncthreads();
  if (kept && incl > goal) atomicMin(reinterpret_cast<unsigned long long*>(&sh.pick_i), static_cast<unsigned long long>(t));
  __syncthreads();
  long long first = sh.pick_i;
  __syncthreads();
  if (first == 0x7fffffff) first = max_i64(sh, kept ? t : -1);  // rounding: the last kept one
  if (t == first) {
    out[2 * blockIdx.x] = id;
    out[2 * blockIdx.x + 1] = n_kept == 1 ? kSampleSingle : kSampleDrew;
  }
}

template <typename U>
__device__ void sample_row(Shared& sh, const U* p, int64_t n, const DevArgs& a, int32_t* out) {
  // The maximum (first index on ties), NaN and all -inf.
  unsigned long long best = 0;
  long long nan_at = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float f = load(p, i);
    if (f != f) {
      nan_at = min(nan_at, static_cast<long long>(i));
    } else if (f > -FLT_MAX || f == -FLT_MAX) {
      const unsigned long long key = (static_cast<unsigned long long>(ordered(f)) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
      best = key > best ? key : best;
    }
  }
  best = max_u64(sh, best);
  nan_at = min_i64(sh, nan_at);
  if (nan_at != LLONG_MAX) return finish(out, static_cast<int32_t>(nan_at), kSampleNaN);
  if (best == 0) return finish(out, 0, kSampleNoToken);
  const int32_t best_id = static_cast<int32_t>(~static_cast<uint32_t>(best & 0xffffffffu));
  if (a.temperature == 0.0) return finish(out, best_id, kSampleSingle);
  const double vmax = unordered(static_cast<uint32_t>(best >> 32)), inv_t = a.inv_t;

  if (a.top_k > 0 && a.top_k < n) {
    auto by_logit = [&](int64_t i, uint32_t& key, unsigned long long& w) {
      const float f = load(p, i);
      if (!((static_cast<double>(f) - vmax) * inv_t > -80.0)) return false;
      key = ordered(f);
      w = 1;
      return true;
    };
    const long long k = min(a.top_k, static_cast<long long>(kDeviceMaxTopK));
    const Selected s = radix_select(sh, n, by_logit, static_cast<double>(k), false);
    // Ties at the k-th logit beyond the buffer: only the lowest ids of them, found in id order.
    long long cut = n;
    if (s.above + s.eq_count > static_cast<unsigned long long>(kCap)) {
      const double r = static_cast<double>(k) - static_cast<double>(s.above);
      double tot;
      long long cnt;
      cut = find_in_order<false>(sh, n, [&](int64_t i) {
        uint32_t key; unsigned long long w;
        return by_logit(i, key, w) && key == s.key ? 1.0 : 0.0;
      }, [r](double) { return r; }, tot, cnt);
    }
    if (threadIdx.x == 0) sh.slot = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      uint32_t key;
      unsigned long long w;
      if (!by_logit(i, key, w) || key < s.key || (key == s.key && i > cut)) continue;
      const unsigned at = atomicAdd(&sh.slot, 1u);
      if (at < kCap) sh.u.cand[at] = (static_cast<unsigned long long>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
    }
    __syncthreads();
    const int got = static_cast<int>(min(sh.slot, static_cast<unsigned>(kCap)));
    int n2 = 1;
    while (n2 < got) n2 <<= 1;
    for (int i = got + threadIdx.x; i < n2; i += kThreads) sh.u.cand[i] = 0;
    __syncthreads();
    // Bitonic sort, descending: higher logit first, then lower id (the complemented id is larger).
    for (int size = 2; size <= n2; size <<= 1) {
      for (int j = size >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < n2; i += kThreads) {
          const int o = i ^ j;
          if (o > i) {
            const unsigned long long x = sh.u.cand[i], y = sh.u.cand[o];
            if (((i & size) == 0) ? x < y : x > y) {
              sh.u.cand[i] = y;
              sh.u.cand[o] = x;
            }
          }
        }
        __syncthreads();
      }
    }
    draw_ranked(sh, a, static_cast<int>(min(static_cast<long long>(got), k)), vmax, out);
    return;
  }

  auto weight = [&](int64_t i, float& w) {
    const double z = (static_cast<double>(load(p, i)) - vmax) * inv_t;
    if (!(z > -80.0)) return false;
    w = expf(static_cast<float>(z));
    return true;
  };
  // The nucleus: weights above w_cut, and those equal to it up to id `cut`.
  uint32_t w_cut = 0;
  long long cut = n;
  if (a.top_p < 1.0) {
    auto by_weight = [&](int64_t i, uint32_t& key, unsigned long long& m) {
      float w;
      if (!weight(i, w)) return false;
      key = __float_as_uint(w);
      m = __double2ull_rn(static_cast<double>(w) * kFix);
      return true;
    };
    const Selected s = radix_select(sh, n, by_weight, a.top_p, true);
    w_cut = s.key;
    if (s.eq_count > 1) {
      // Every tied element weighs the same m: the first r of them (in id order) reach the target.
      const unsigned long long m = __double2ull_rn(static_cast<double>(__uint_as_float(s.key)) * kFix);
      long long r = s.eq_count;
      if (m > 0) {
        r = static_cast<long long>(ceil((s.target - static_cast<double>(s.above)) / static_cast<double>(m)));
        while (r > 1 && static_cast<double>(s.above + static_cast<unsigned long long>(r - 1) * m) >= s.target) --r;
        while (r < s.eq_count && static_cast<double>(s.above + static_cast<unsigned long long>(r) * m) < s.target) ++r;
        r = max(1LL, min(r, static_cast<long long>(s.eq_count)));
      }
      if (r < s.eq_count) {
        double tot;
        long long cnt;
        cut = find_in_order<false>(sh, n, [&](int64_t i) {
          float w;
          return weight(i, w) && __float_as_uint(w) == w_cut ? 1.0 : 0.0;
        }, [r](double) { return static_cast<double>(r); }, tot, cnt);
      }
    }
  }
  const double min_p = a.min_p, u = a.uniform;
  double total;
  long long n_kept;
  const long long token = find_in_order<true>(sh, n, [&](int64_t i) {
    float w;
    if (!weight(i, w)) return 0.0;
    const uint32_t b = __float_as_uint(w);
    if (b < w_cut || (b == w_cut && i > cut)) return 0.0;
    const double wd = static_cast<double>(w);
    return wd < min_p ? 0.0 : wd;
  }, [u](double t) { return u * t; }, total, n_kept);
  finish(out, static_cast<int32_t>(token < 0 ? best_id : token), n_kept <= 1 ? kSampleSingle : kSampleDrew);
}

// Block b samples args[b]. Rows with bias or penalties are processed into scratch (their float32
// copy) first; the others are read where they are.
template <typename T>
__global__ void __launch_bounds__(kThreads, 1) sample_kernel(const T* __restrict__ logits, int64_t n, const DevArgs* __restrict__ args,
                                                             const SampleSpecial* __restrict__ special, float* scratch, int32_t* out) {
  __shared__ Shared sh;
  const DevArgs a = args[blockIdx.x];
  const T* x = logits + a.row * n;
  if (a.n_special == 0) return sample_row(sh, x, n, a, out);
  float* buf = scratch + static_cast<int64_t>(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) buf[i] = load(x, i);
  __syncthreads();
  for (long long s = threadIdx.x; s < a.n_special; s += kThreads) {
    const SampleSpecial e = special[a.special_at + s];
    float v = buf[e.token];
    if (e.has_bias) v += e.bias;
    if (e.count > 0) {
      double l = v;
      if (a.rep != 1.0) l = l > 0 ? l / a.rep : l * a.rep;
      l -= a.presence + a.frequency * e.count;
      v = static_cast<float>(l);
    }
    buf[e.token] = v;
  }
  __syncthreads();
  sample_row(sh, static_cast<const float*>(buf), n, a, out);
}

}  // namespace

void CudaBackend::sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out) {
  check_device(logits, "sample", "logits");
  check_float(logits, "sample", "logits");
  check_contiguous(logits, "sample", "logits");
  if (logits.ndim() < 1 || logits.dim(-1) == 0) fail(ErrorCode::kInvalidArgument, "cuda sample: logits must have a last dimension");
  if (rows.empty()) return;
  const int64_t n = logits.dim(-1), nrows = logits.numel() / n;
  if (n > INT32_MAX || rows.size() > 65535) fail(ErrorCode::kUnsupported, "cuda sample: rows too long or too many");
  std::vector<DevArgs> dev(rows.size());
  std::vector<SampleSpecial> special;
  bool any_special = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleArgs& s = rows[r];
    if (s.row < 0 || s.row >= nrows) fail(ErrorCode::kInvalidArgument, "cuda sample: row " + std::to_string(s.row) + " outside the logits");
    if (s.top_k > kDeviceMaxTopK && s.top_k < n)
      fail(ErrorCode::kUnsupported, "cuda sample: top_k above " + std::to_string(kDeviceMaxTopK) + " (sample on the host)");
    if (s.n_special < 0 || (s.n_special > 0 && !s.special)) fail(ErrorCode::kInvalidArgument, "cuda sample: bad special tokens");
    DevArgs& d = dev[r];
    d.row = s.row;
    d.top_k = s.top_k;
    d.special_at = static_cast<long long>(special.size());
    d.n_special = s.n_special;
    d.temperature = s.temperature;
    d.inv_t = s.inv_temperature;
    d.top_p = s.top_p;
    d.min_p = s.min_p;
    d.rep = s.repetition_penalty;
    d.presence = s.presence_penalty;
    d.frequency = s.frequency_penalty;
    d.uniform = s.uniform;
    for (int64_t i = 0; i < s.n_special; ++i) {
      if (s.special[i].token < 0 || s.special[i].token >= n)
        fail(ErrorCode::kInvalidArgument, "cuda sample: special token " + std::to_string(s.special[i].token) + " outside the vocabulary");
      special.push_back(s.special[i]);
    }
    any_special = any_special || s.n_special > 0;
  }
  // One device buffer: args, special tokens, results (and the processed rows when needed).
  const int64_t args_bytes = static_cast<int64_t>(dev.size() * sizeof(DevArgs));
  const int64_t special_bytes = static_cast<int64_t>(special.size() * sizeof(SampleSpecial));
  const int64_t out_bytes = static_cast<int64_t>(rows.size() * 2 * sizeof(int32_t));
  const int64_t head = (args_bytes + special_bytes + out_bytes + 255) / 256 * 256;
  const int64_t rows_bytes = any_special ? static_cast<int64_t>(rows.size()) * n * static_cast<int64_t>(sizeof(float)) : 0;
  Scratch buf(head + rows_bytes, "the sampling workspace");
  std::vector<unsigned char> host(static_cast<size_t>(args_bytes + special_bytes));
  std::memcpy(host.data(), dev.data(), static_cast<size_t>(args_bytes));
  if (special_bytes) std::memcpy(host.data() + args_bytes, special.data(), static_cast<size_t>(special_bytes));
  copy(buf.p, Device::kCUDA, host.data(), Device::kCPU, static_cast<int64_t>(host.size()));
  auto* base = static_cast<unsigned char*>(buf.p);
  const auto* d_args = reinterpret_cast<const DevArgs*>(base);
  const auto* d_special = reinterpret_cast<const SampleSpecial*>(base + args_bytes);
  auto* d_out = reinterpret_cast<int32_t*>(base + args_bytes + special_bytes);
  float* d_rows = any_special ? reinterpret_cast<float*>(base + head) : nullptr;
  MLXB_FLOAT_SWITCH(logits.dtype(), T,
      sample_kernel<T><<<static_cast<unsigned>(rows.size()), kThreads, 0, stream()>>>(logits.ptr<T>(), n, d_args, d_special, d_rows,
                                                                                      d_out));
  MLXB_CUDA_LAUNCHED("sample");
  std::vector<int32_t> res(rows.size() * 2);
  copy(res.data(), Device::kCPU, d_out, Device::kCUDA, out_bytes);
  for (size_t r = 0; r < rows.size(); ++r) out[r] = SampleOut{res[2 * r], res[2 * r + 1]};
}

}  // namespace mlxb::cuda
