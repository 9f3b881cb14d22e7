// Block-wide pieces of the sampling kernel (sample.cu): one block of kThreads threads works on one
// row of logits. Scans and reductions in a fixed order (the same result every run), a radix select
// over 32-bit keys with integer weights (shared-memory atomics on integers: order-free, so also
// deterministic), and a search in id order for the element where a running sum crosses a target.
// Every function here must be called by all threads of the block (they synchronise).
#pragma once
#include <cstdint>

namespace mlxb::cuda::sample_block {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // radix digit: 11 + 11 + 10 bits
constexpr int kCap = 2048;   // gathered top-k candidates
constexpr int kSubs = 2048;  // id-ordered pieces of a row for the prefix search

struct Shared {
  union {
    unsigned long long mass[kBins];  // radix histogram
    unsigned long long cand[kCap];   // top-k candidates: (ordered logit << 32) | ~id
    double sub[kSubs];               // prefix search: sum of each piece
  } u;
  unsigned cnt[kBins];
  double red_d[kWarps];
  unsigned long long red_u[kWarps];
  long long red_i[kWarps];
  long long pick_i;
  unsigned long long pick_u;
  double pick_d;
  unsigned slot;
};

// Order-preserving bits of a float (-0 counted as +0) and back.
__device__ __forceinline__ uint32_t ordered(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float unordered(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

// Inclusive scan of one value per thread in thread order; `total` gets the sum of all.
template <typename V>
__device__ V scan(Shared& sh, V v, V& total) {
  static_assert(sizeof(V) == sizeof(double), "scan: 8-byte values");
  V* tot = reinterpret_cast<V*>(sh.red_d);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  if (lane == 31) tot[warp] = v;
  __syncthreads();
  if (warp == 0) {
    V t = tot[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const V s = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += s;
    }
    tot[lane] = t;
  }
  __syncthreads();
  const V add = warp ? tot[warp - 1] : V(0);
  total = tot[kWarps - 1];
  __syncthreads();
  return v + add;
}

__device__ __forceinline__ unsigned long long max_u64(Shared& sh, unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long t = __shfl_xor_sync(0xffffffffu, v, o);
    v = t > v ? t : v;
  }
  if ((threadIdx.x & 31) == 0) sh.red_u[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long r = sh.red_u[0];
  for (int w = 1; w < kWarps; ++w) r = sh.red_u[w] > r ? sh.red_u[w] : r;
  __syncthreads();
  return r;
}

__device__ __forceinline__ long long min_i64(Shared& sh, long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const long long t = __shfl_xor_sync(0xffffffffu, v, o);
    v = t < v ? t : v;
  }
  if ((threadIdx.x & 31) == 0) sh.red_i[threadIdx.x >> 5] = v;
  __syncthreads();
  long long r = sh.red_i[0];
  for (int w = 1; w < kWarps; ++w) r = sh.red_i[w] < r ? sh.red_i[w] : r;
  __syncthreads();
  return r;
}

__device__ __forceinline__ long long max_i64(Shared& sh, long long v) { return -min_i64(sh, -v); }

// Radix select over the valid elements of [0, n): item(i, key, weight) says whether i takes part
// and gives its key and integer weight. Finds the largest key K with S(key >= K) >= target, where
// S sums weights (target = fraction * total weight when `relative`). Returns K; `above` gets
// S(key > K), eq_weight / eq_count the weight and number of elements with key == K, total the
// weight of all valid elements.
struct Selected {
  uint32_t key;
  unsigned long long above, eq_weight, total;
  unsigned eq_count;
  double target;
};

template <class Item>
__device__ Selected radix_select(Shared& sh, int64_t n, Item item, double target, bool relative) {
  Selected s{};
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : (level == 1 ? 10 : 0);
    const uint32_t dmask = level == 2 ? 0x3ffu : 0x7ffu;
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      sh.u.mass[b] = 0;
      sh.cnt[b] = 0;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      uint32_t key;
      unsigned long long w;
      if (!item(i, key, w) || (key & mask) != prefix) continue;
      const uint32_t d = (key >> shift) & dmask;
      atomicAdd(&sh.u.mass[d], w);
      atomicAdd(&sh.cnt[d], 1u);
    }
    __syncthreads();
    // Bins from the highest down, two per thread (thread order = descending bin order).
    const int hi = kBins - 1 - 2 * static_cast<int>(threadIdx.x), lo = hi - 1;
    const unsigned long long mh = sh.u.mass[hi], ml = sh.u.mass[lo];
    unsigned long long sum_all = 0;
    const unsigned long long incl = scan<unsigned long long>(sh, mh + ml, sum_all);
    if (level == 0) {
      s.total = sum_all;
      if (relative) target *= static_cast<double>(sum_all);
      if (target > static_cast<double>(sum_all)) target = static_cast<double>(sum_all);
      s.target = target;
    }
    const unsigned long long excl = incl - mh - ml;
    if (threadIdx.x == 0) sh.pick_i = -1;
    __syncthreads();
    if (static_cast<double>(above + excl) < target && static_cast<double>(above + incl) >= target) {
      const bool in_hi = static_cast<double>(above + excl + mh) >= target;
      sh.pick_i = in_hi ? hi : lo;
      sh.pick_u = in_hi ? above + excl : above + excl + mh;
    }
    __syncthreads();
    int b = static_cast<int>(sh.pick_i);
    if (b < 0) {  // target <= 0 (nothing needed): the highest non-empty bin
      b = 0;
      for (int j = kBins - 1; j >= 0; --j)
        if (sh.cnt[j]) { b = j; break; }
    } else {
      above = sh.pick_u;
    }
    s.eq_weight = sh.u.mass[b];
    s.eq_count = sh.cnt[b];
    prefix |= static_cast<uint32_t>(b) << shift;
    mask |= dmask << shift;
    __syncthreads();
  }
  s.key = prefix;
  s.above = above;
  return s;
}

// The first element of [0, n) in id order whose running sum of val(i) (double, >= 0) crosses
// target(total), crossing meaning `sum > t` when kStrict, `sum >= t` otherwise; only elements with
// val > 0 are returned. None (rounding): the last element with val > 0, or -1 when there is none.
// `count` gets the number of elements with val > 0, `total` their sum.
template <bool kStrict, class Val, class Target>
__device__ long long find_in_order(Shared& sh, int64_t n, Val val, Target target_of, double& total, long long& count) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t chunks = (n + 31) / 32;
  const int64_t per = (chunks + kSubs - 1) / kSubs;  // chunks per piece
  const int64_t pieces = (chunks + per - 1) / per;
  long long my_count = 0, my_last = -1;
  for (int64_t p = warp; p < pieces; p += kWarps) {
    const int64_t b0 = p * per * 32, b1 = min(n, b0 + per * 32);
    double acc = 0;
    for (int64_t i = b0 + lane; i < b1; i += 32) {
      const double v = val(i);
      if (v > 0) {
        acc += v;
        ++my_count;
        my_last = i;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) sh.u.sub[p] = acc;
  }
  const long long last = max_i64(sh, my_last);  // synchronises: sub[] is complete
  unsigned long long c = 0;
  (void)scan<unsigned long long>(sh, static_cast<unsigned long long>(my_count), c);
  count = static_cast<long long>(c);
  if (warp == 0) {
    double t = 0;
    for (int64_t p = lane; p < pieces; p += 32) t += sh.u.sub[p];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    t = __shfl_sync(0xffffffffu, t, 0);
    const double goal = target_of(t);
    // The piece where the running sum crosses.
    double run = 0;
    int64_t piece = -1;
    for (int64_t base = 0; base < pieces && piece < 0; base += 32) {
      const double v = base + lane < pieces ? sh.u.sub[base + lane] : 0.0;
      double incl = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const double s = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += s;
      }
      const bool hit = kStrict ? run + incl > goal : run + incl >= goal;
      const unsigned m = __ballot_sync(0xffffffffu, hit);
      if (m) {
        const int l = __ffs(m) - 1;
        const double excl = __shfl_up_sync(0xffffffffu, incl, 1);
        const double before = __shfl_sync(0xffffffffu, lane == 0 ? 0.0 : excl, l);
        piece = base + l;
        run += before;
      } else {
        run += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
    // Walk the elements from that piece on until the sum crosses.
    long long found = -1;
    if (piece >= 0) {
      for (int64_t c0 = piece * per * 32; c0 < n && found < 0; c0 += 32) {
        const int64_t i = c0 + lane;
        const double v = i < n ? val(i) : 0.0;
        const double vv = v > 0 ? v : 0.0;
        double incl = vv;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const double s = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += s;
        }
        const bool hit = vv > 0 && (kStrict ? run + incl > goal : run + incl >= goal);
        const unsigned m = __ballot_sync(0xffffffffu, hit);
        if (m) found = c0 + (__ffs(m) - 1);
        else run += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
    if (lane == 0) {
      sh.pick_i = found >= 0 ? found : last;
      sh.pick_d = t;
    }
  }
  __syncthreads();
  const long long r = sh.pick_i;
  total = sh.pick_d;
  __syncthreads();
  return r;
}

}  // namespace mlxb::cuda::sample_block
