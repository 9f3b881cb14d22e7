// The engine's batched-step ops on the CPU:
// - kv_gather: out[h, i, :] = cache[h, slots[i], :] (the inverse of kv_write).
// - paged_attention: per row, the row's keys/values are gathered from the pool in position order
//   and the attention kernel runs on them, so every query gets bit for bit what `attention` gives
//   it over a contiguous cache of the same positions (the batch-invariance contract).
#include <string>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/common.h"
#include "core/thread_pool.h"

namespace mlxb::cpu {

namespace {

void check_pool(const char* op, const char* name, const Tensor& t) {
  check_host(op, name, t, false);
  check_float(op, name, t);
  MLXB_ARG(t.ndim() == 3 && t.stride(2) == 1 && t.stride(1) == t.dim(2) && t.stride(0) >= t.dim(1) * t.dim(2), op,
          std::string(name) + " must be [H, S, D] with contiguous rows and dim-0 stride >= S*D, got " + t.describe());
}

void gather(const Tensor& cache, const int32_t* slots, int64_t n, Tensor& out) {
  const int64_t h = cache.dim(0), d = cache.dim(2);
  const DType ct = cache.dtype(), ot = out.dtype();
  const int64_t ce = dtype_size(ct), oe = dtype_size(ot), stride0 = cache.stride(0);
  const char* base = static_cast<const char*>(cache.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t hi = 0; hi < h; ++hi)
    for (int64_t i = 0; i < n; ++i) {
      const char* from = base + (hi * stride0 + static_cast<int64_t>(slots[i]) * d) * ce;
      char* to = dst + (hi * n + i) * d * oe;
      if (ct == ot) {
        std::copy(from, from + d * ce, to);
      } else {
        for (int64_t j = 0; j < d; ++j) store_f32(to, ot, j, load_f32(from, ct, j));
      }
    }
}

}  // namespace

void CpuBackend::kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out) {
  const char* op = "kv_gather";
  check_pool(op, "cache", cache);
  check_host(op, "slots", slots);
  check_host(op, "out", out);
  check_dtype(op, "slots", slots, DType::I32);
  check_float(op, "out", out);
  const int64_t n = slots.numel();
  MLXB_ARG(out.ndim() == 3 && out.dim(0) == cache.dim(0) && out.dim(1) == n && out.dim(2) == cache.dim(2), op,
          "out must be [H, N, D] = [" + std::to_string(cache.dim(0)) + ", " + std::to_string(n) + ", " +
              std::to_string(cache.dim(2)) + "], got " + out.describe());
  const int32_t* sl = slots.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    MLXB_ARG(sl[i] >= 0 && sl[i] < cache.dim(1), op,
             "slot " + std::to_string(sl[i]) + " at " + std::to_string(i) + " is outside the cache [0, " +
                 std::to_string(cache.dim(1)) + ")");
  gather(cache, sl, n, out);
}

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                                 const AttentionArgs& args, Tensor& out) {
  const char* op = "paged_attention";
  check_host(op, "q", q);
  check_host(op, "out", out);
  check_pool(op, "k", k);
  check_pool(op, "v", v);
  MLXB_ARG(q.ndim() == 3 && out.ndim() == 3 && out.dim(0) == q.dim(0) && out.dim(1) == q.dim(1) &&
               out.dim(2) == v.dim(2), op, "q must be [T, Hq, D] and out [T, Hq, Dv]: " + q.describe() + ", " + out.describe());
  MLXB_ARG(k.dim(0) == v.dim(0) && k.dim(1) == v.dim(1) && k.dim(2) == q.dim(2), op,
           "k/v pools do not match q: " + k.describe() + ", " + v.describe() + ", " + q.describe());
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&rows.q_offset, "q_offset"}, {&rows.q_count, "q_count"},
                                {&rows.kv_len, "kv_len"}, {&rows.block_table, "block_table"}}) {
    check_host(op, name, *t);
    check_dtype(op, name, *t, DType::I32);
  }
  const int64_t r_count = rows.q_offset.numel();
  MLXB_ARG(rows.q_count.numel() == r_count && rows.kv_len.numel() == r_count && rows.block_table.ndim() == 2 &&
               rows.block_table.dim(0) == r_count, op, "row tensors disagree on the number of rows");
  MLXB_ARG(rows.block_size > 0, op, "block_size must be positive");
  const int64_t max_blocks = rows.block_table.dim(1), bs = rows.block_size, total = q.dim(0);
  const int32_t* off = rows.q_offset.ptr<int32_t>();
  const int32_t* cnt = rows.q_count.ptr<int32_t>();
  const int32_t* len = rows.kv_len.ptr<int32_t>();
  const int32_t* table = rows.block_table.ptr<int32_t>();
  for (int64_t r = 0; r < r_count; ++r) {
    const std::string at = " (row " + std::to_string(r) + ")";
    MLXB_ARG(cnt[r] >= 1 && off[r] >= 0 && int64_t{off[r]} + cnt[r] <= total, op, "query range outside q" + at);
    MLXB_ARG(len[r] >= cnt[r] && (int64_t{len[r]} + bs - 1) / bs <= max_blocks, op, "kv_len not covered by the block table" + at);
    for (int64_t b = 0; b < (int64_t{len[r]} + bs - 1) / bs; ++b) {
      const int64_t blk = table[r * max_blocks + b];
      MLXB_ARG(blk >= 0 && (blk + 1) * bs <= k.dim(1), op, "block id outside the pool" + at);
    }
  }
  for (int64_t r = 0; r < r_count; ++r) {
    const int64_t n = len[r];
    std::vector<int32_t> slots(static_cast<size_t>(n)), pos(static_cast<size_t>(n)), qpos(static_cast<size_t>(cnt[r]));
    for (int64_t p = 0; p < n; ++p) {
      slots[static_cast<size_t>(p)] = static_cast<int32_t>(table[r * max_blocks + p / bs] * bs + p % bs);
      pos[static_cast<size_t>(p)] = static_cast<int32_t>(p);
    }
    for (int64_t i = 0; i < cnt[r]; ++i) qpos[static_cast<size_t>(i)] = static_cast<int32_t>(n - cnt[r] + i);
    Tensor kr = Tensor::empty({k.dim(0), n, k.dim(2)}, k.dtype());
    Tensor vr = Tensor::empty({v.dim(0), n, v.dim(2)}, v.dtype());
    gather(k, slots.data(), n, kr);
    gather(v, slots.data(), n, vr);
    Tensor qr = q.slice_rows(off[r], off[r] + cnt[r]);
    Tensor orow = out.slice_rows(off[r], off[r] + cnt[r]);
    attention(qr, kr, vr, Tensor::wrap(qpos.data(), {cnt[r]}, DType::I32), Tensor::wrap(pos.data(), {n}, DType::I32), args,
              orow);
  }
}

}  // namespace mlxb::cpu
