// Paged KV lego (see paged.h).
#include "kv/paged.h"

#include <algorithm>
#include <string>

#include "ops/ops.h"

namespace mlxb {

int64_t PagedKVPool::bytes_per_block(const PagedSpec& s) {
  int64_t per_layer = checked_mul(checked_mul(s.kv_heads, s.head_dim, "KV block"), s.block_size, "KV block");
  return checked_mul(checked_mul(per_layer, 2 * s.layers, "KV block"), dtype_size(s.dtype), "KV block");
}

PagedKVPool::PagedKVPool(const PagedSpec& spec) : spec_(spec) {
  if (spec.layers == 0) return;  // a graph without attention state (e.g. a lookup-table test model)
  if (spec.layers < 0 || spec.kv_heads <= 0 || spec.head_dim <= 0 || spec.block_size <= 0 || spec.num_blocks <= 0)
    fail(ErrorCode::kInvalidArgument, "paged KV pool needs positive layers, heads, head_dim, block size and blocks");
  const int64_t slots = checked_mul(spec.num_blocks, spec.block_size, "KV pool slots");
  if (slots > (int64_t(1) << 31) - 1) fail(ErrorCode::kInvalidArgument, "KV pool too large: more than 2^31 slots", "kvBlocks");
  bytes_ = checked_mul(bytes_per_block(spec), spec.num_blocks, "KV pool bytes");
  for (int64_t l = 0; l < spec.layers; ++l) {
    k_.push_back(Tensor::zeros({spec.kv_heads, slots, spec.head_dim}, spec.dtype, spec.device));
    v_.push_back(Tensor::zeros({spec.kv_heads, slots, spec.head_dim}, spec.dtype, spec.device));
  }
}

PagedLayerCache::PagedLayerCache(PagedKVPool& pool, int64_t layer, const std::vector<int32_t>& table, int64_t length)
    : pool_(pool), layer_(layer), table_(table), length_(length) {}

int64_t PagedLayerCache::bytes() const {
  const PagedSpec& s = pool_.spec();
  return static_cast<int64_t>(table_.size()) * s.block_size * s.kv_heads * s.head_dim * 2 * dtype_size(s.dtype);
}

Tensor PagedLayerCache::gather(const Tensor& pool, int64_t n) const {
  const PagedSpec& s = pool_.spec();
  const int64_t h = pool.dim(0), d = pool.dim(2), bs = s.block_size;
  Tensor out = Tensor::empty({h, n, d}, pool.dtype(), pool.device());
  Backend& be = backend(pool.device());
  const int64_t esz = dtype_size(pool.dtype());
  const int64_t pool_stride = pool.stride(0);
  const char* src = static_cast<const char*>(pool.data());
  char* dst = static_cast<char*>(out.data());
  const int64_t nblocks = (n + bs - 1) / bs;
  for (int64_t hi = 0; hi < h; ++hi) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t count = std::min(bs, n - b * bs);
      const int64_t from = (hi * pool_stride + static_cast<int64_t>(table_[static_cast<size_t>(b)]) * bs * d) * esz;
      const int64_t to = (hi * n + b * bs) * d * esz;
      be.copy(dst + to, pool.device(), src + from, pool.device(), count * d * esz);
    }
  }
  return out;
}

KVView PagedLayerCache::update(const Tensor& k, const Tensor& v, const int32_t* pos, int64_t t) {
  const PagedSpec& s = pool_.spec();
  const int64_t bs = s.block_size;
  std::vector<int32_t> slots(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    const int64_t p = pos[i];
    if (p != length_ + i) fail(ErrorCode::kInternal, "paged cache: positions must continue the sequence");
    const int64_t b = p / bs;
    if (b >= static_cast<int64_t>(table_.size()))
      fail(ErrorCode::kInternal, "paged cache: block table does not cover position " + std::to_string(p));
    slots[static_cast<size_t>(i)] = static_cast<int32_t>(table_[static_cast<size_t>(b)] * bs + p % bs);
  }
  Tensor slot_t = Tensor::wrap(slots.data(), {t}, DType::I32);
  if (s.device != Device::kCPU) slot_t = slot_t.to(s.device);
  ops::kv_write(k, slot_t, pool_.keys(layer_));
  ops::kv_write(v, slot_t, pool_.values(layer_));
  length_ += t;
  KVView view;
  view.k = gather(pool_.keys(layer_), length_);
  view.v = gather(pool_.values(layer_), length_);
  std::vector<int32_t> positions(static_cast<size_t>(length_));
  for (int64_t i = 0; i < length_; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  Tensor pos_t = Tensor::wrap(positions.data(), {length_}, DType::I32);
  view.pos = pos_t.to(s.device);  // owned copy (also for CPU)
  return view;
}

CacheSet make_paged_caches(PagedKVPool& pool, const std::vector<int32_t>& table, int64_t length) {
  CacheSet set;
  for (int64_t l = 0; l < pool.spec().layers; ++l)
    set.push_back(std::make_unique<PagedLayerCache>(pool, l, table, length));
  return set;
}

}  // namespace mlxb
