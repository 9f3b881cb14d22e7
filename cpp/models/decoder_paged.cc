// The batched forward over the engine's paged KV pool (see decoder_rows.h): recorded decode
// steps (rows_graph.h) and the eager path for every other step.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "models/decoder_rows.h"
#include "models/decoder_rows_impl.h"
#include "models/rows_graph.h"
#include "models/step_profile.h"

namespace mlxb {

using namespace batched;

namespace {

void check_pool(const DecoderParts& d, const PagedKVPool& pool) {
  const PagedSpec& ps = pool.spec();
  if (ps.layers != d.cfg->num_layers || ps.kv_heads != d.cfg->num_kv_heads || ps.head_dim != d.cfg->head_dim ||
      ps.device != d.device)
    fail(ErrorCode::kInvalidArgument, "the KV pool does not match the model", "pool");
}

void check_blocks(const PagedSpec& ps, const Model::PagedRow& r) {
  const int64_t len = r.start + r.t;
  if (!r.blocks || static_cast<int64_t>(r.blocks->size()) * ps.block_size < len)
    fail(ErrorCode::kInternal, "paged row: block table does not cover position " + std::to_string(len - 1));
  for (int32_t blk : *r.blocks)
    if (blk < 0 || blk >= ps.num_blocks) fail(ErrorCode::kInternal, "paged row: block id outside the pool");
}

// The row's last position is needed: its logits, argmax or a device-sampled token.
bool wants_output(const Model::PagedRow& r) { return r.logits || r.argmax || (r.sample && r.sampled); }

bool same_rope(const RopeArgs& a, const RopeArgs& c) {
  return a.inv_freq.defined() == c.inv_freq.defined() && (!a.inv_freq.defined() || a.inv_freq.data() == c.inv_freq.data()) &&
         a.mscale == c.mscale;
}

// Hands each sampled row its argmax, device-sampled token and/or logits from the step's device
// outputs (rows in plan order; `out` row k belongs to the k-th row that asked for something).
void deliver(const DecoderParts& d, const std::vector<Model::PagedRow>& rows, const Tensor& out, const Tensor* next) {
  std::vector<float*> dst;
  std::vector<SampleArgs> sample;
  std::vector<SampleOut*> sampled;
  bool any_argmax = false, any_logits = false;
  for (const Model::PagedRow& r : rows) {
    if (!wants_output(r)) continue;
    if (r.sample && r.sampled) {
      sample.push_back(*r.sample);
      sample.back().row = static_cast<int64_t>(dst.size());
      sampled.push_back(r.sampled);
    }
    dst.push_back(r.logits);
    any_argmax = any_argmax || r.argmax;
    any_logits = any_logits || r.logits;
  }
  if (dst.empty()) return;
  if (!sample.empty()) {
    std::vector<SampleOut> res(sample.size());
    ops::sample(out, sample, res.data());
    for (size_t k = 0; k < res.size(); ++k) *sampled[k] = res[k];
  }
  if (any_argmax) {
    Tensor am;
    if (next) {
      am = *next;
    } else {
      am = Tensor::empty({out.dim(0)}, DType::I32, d.device);
      ops::argmax(out, am);
    }
    std::vector<int32_t> host(dst.size());
    backend(d.device).copy(host.data(), Device::kCPU, am.data(), d.device, static_cast<int64_t>(host.size() * sizeof(int32_t)));
    size_t k = 0;
    for (const Model::PagedRow& r : rows) {
      if (!wants_output(r)) continue;
      if (r.argmax) *r.argmax = host[k];
      ++k;
    }
  }
  if (any_logits) copy_logits(d, out.slice_rows(0, static_cast<int64_t>(dst.size())), dst);
}

// A queued step (decoder_paged_queue): only the argmax is asked for; `fed` takes the ids from the
// step queued before. `ticket` receives the read of the argmax.
struct QueuedStep {
  bool fed = false;
  int64_t ticket = -1;
};

// A step where every row decodes one token and samples it, on CUDA with rope arguments shared by
// all rows: padded to a row bucket and replayed from a recorded graph (rows_graph.h), or run
// eagerly in the same padded form when not recorded (yet). False: the step does not qualify.
// With `queue`, only a recorded step runs, and it is left in flight (see QueuedStep).
bool paged_decode_step(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows,
                       QueuedStep* queue = nullptr) {
  if (!d.row_graphs || d.device == Device::kCPU || StepProfile::get().level() >= 2) return false;
  const PagedSpec& ps = pool.spec();
  const int64_t bs = ps.block_size, n = static_cast<int64_t>(rows.size());
  if (queue && n * static_cast<int64_t>(sizeof(int32_t)) > Backend::kReadBytes) return false;
  int64_t max_len = 1;
  for (const Model::PagedRow& r : rows) {
    if (r.t != 1 || !wants_output(r)) return false;
    if (queue && (!r.argmax || r.logits || r.sample)) return false;
    max_len = std::max(max_len, r.start + 1);
  }
  if (!d.rope_global->fixed(max_len) || (d.rope_local && !d.rope_local->fixed(max_len))) return false;
  const RopeArgs full = d.rope_global->args(max_len);
  const RopeArgs local = d.rope_local ? d.rope_local->args(max_len) : RopeArgs();
  for (const Model::PagedRow& r : rows) {
    if (!same_rope(d.rope_global->args(r.start + 1), full)) return false;
    if (d.rope_local && !same_rope(d.rope_local->args(r.start + 1), local)) return false;
  }
  const auto t0 = StepProfile::Clock::now();
  const bool fed = queue && queue->fed;
  for (const Model::PagedRow& r : rows) {
    if (!fed) check_row(d, r.ids, r.t, r.start);
    check_blocks(ps, r);
  }
  const int64_t rb = RowGraphs::rows_bucket(n), width = RowGraphs::width_bucket((max_len + bs - 1) / bs);
  std::vector<int32_t> host(static_cast<size_t>(RowGraphs::size(rb, width)), 0);
  auto at = [&](RowGraphs::Section s, int64_t i) -> int32_t& {
    return host[static_cast<size_t>(RowGraphs::offset(s, rb) + i)];
  };
  for (int64_t i = 0; i < rb; ++i) {
    at(RowGraphs::kSel, i) = static_cast<int32_t>(i);
    at(RowGraphs::kQOffset, i) = static_cast<int32_t>(i);
    at(RowGraphs::kQCount, i) = 1;
    at(RowGraphs::kKvLen, i) = 1;   // padding rows: position 0, one key (slot 0 of block 0), no KV write
    at(RowGraphs::kSlots, i) = -1;
  }
  for (int64_t i = 0; i < n; ++i) {
    const Model::PagedRow& r = rows[static_cast<size_t>(i)];
    const std::vector<int32_t>& bl = *r.blocks;
    at(RowGraphs::kIds, i) = fed ? 0 : r.ids[0];  // fed: overwritten on the device
    at(RowGraphs::kPos, i) = static_cast<int32_t>(r.start);
    at(RowGraphs::kSlots, i) = static_cast<int32_t>(bl[static_cast<size_t>(r.start / bs)] * bs + r.start % bs);
    at(RowGraphs::kKvLen, i) = static_cast<int32_t>(r.start + 1);
    const int64_t need = (r.start + bs) / bs;
    std::copy(bl.begin(), bl.begin() + need, host.begin() + RowGraphs::offset(RowGraphs::kTable, rb) + i * width);
  }
  RowGraphs::Body body = [&](const RowGraphs::Inputs& in) {
    Batch b;
    b.total = rb;
    b.offset.assign(1, 0);
    b.count.assign(1, rb);
    b.full.assign(1, full);
    b.local.assign(1, local);
    b.ids_dev = in.ids;
    b.pos_dev = in.pos;
    PagedAttentionRows pr;
    pr.q_offset = in.q_offset;
    pr.q_count = in.q_count;
    pr.kv_len = in.kv_len;
    pr.block_table = in.table;
    pr.block_size = bs;
    pr.max_q_count = 1;
    pr.max_kv_len = width * bs;
    AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                             const RopeArgs* rope, const RowScale* scale) {
      if (scale) {
        ops::rms_scaled_rope_kv_write(q3, k3, v3, *scale->x, scale->eps, b.pos_dev, *rope, in.slots, pool.keys(layer),
                                      pool.values(layer));
        ops::paged_attention(q3, pool.keys(layer), pool.values(layer), pr, p.args, o3);
        return;
      }
      // One launch on CUDA for bf16 pools: the attention kernel rotates q and writes the new k, v.
      ops::rope_paged_attention(q3, k3, v3, b.pos_dev, *rope, in.slots, pool.keys(layer), pool.values(layer), pr, p.args, o3);
    };
    LayerPlan plan;
    plan.attend_ropes = true;
    plan.fuse = true;
    plan.fold = d.folded && !d.batch_invariant;
    RowGraphs::Outputs o;
    o.logits = run_layers(d, b, in.sel, rb, attend, plan);
    o.next = Tensor::empty({rb}, DType::I32, d.device);
    ops::argmax(o.logits, o.next);
    return o;
  };
  // What the recorded kernels captured beyond the input buffer: shapes, mode, rope tables and
  // every layer's pool buffers (a graph stays valid only while all of them are the same).
  std::vector<uint64_t> key = {static_cast<uint64_t>(rb), static_cast<uint64_t>(width), d.batch_invariant ? 1u : 0u,
                               static_cast<uint64_t>(ps.num_blocks),
                               full.inv_freq.defined() ? reinterpret_cast<uintptr_t>(full.inv_freq.data()) : 0,
                               local.inv_freq.defined() ? reinterpret_cast<uintptr_t>(local.inv_freq.data()) : 0};
  for (int64_t l = 0; l < ps.layers; ++l) {
    key.push_back(reinterpret_cast<uintptr_t>(pool.keys(l).data()));
    key.push_back(reinterpret_cast<uintptr_t>(pool.values(l).data()));
  }
  uint32_t bits[2];
  std::memcpy(&bits[0], &full.mscale, sizeof(float));
  std::memcpy(&bits[1], &local.mscale, sizeof(float));
  key.push_back(bits[0]);
  key.push_back(bits[1]);
  const auto t1 = StepProfile::Clock::now();
  if (queue) {
    if (!d.row_graphs->recorded(key)) return false;
    const RowGraphs::Outputs* res = d.row_graphs->run(key, rb, width, host, body, fed ? n : 0);
    if (!res) return false;
    queue->ticket = d.row_graphs->pass_on(res->next, n);
    const auto t2 = StepProfile::Clock::now();
    StepProfile::get().step(n, true, t0, t1, t2, t2);
    return true;
  }
  const RowGraphs::Outputs* res = d.row_graphs->run(key, rb, width, host, body);
  const bool replayed = res != nullptr;
  RowGraphs::Outputs eager;
  if (!res) {
    Tensor buf = upload_i32(host, d.device);
    eager = body(RowGraphs::views(buf, rb, width));
    res = &eager;
  }
  const auto t2 = StepProfile::Clock::now();
  deliver(d, rows, res->logits, &res->next);
  StepProfile::get().step(n, replayed, t0, t1, t2, StepProfile::Clock::now());
  return true;
}

}  // namespace

int64_t decoder_paged_queue(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows, bool fed) {
  if (rows.empty()) return -1;
  check_pool(d, pool);
  QueuedStep q;
  q.fed = fed;
  return paged_decode_step(d, pool, rows, &q) ? q.ticket : -1;
}

void decoder_paged_collect(Device device, int64_t ticket, int32_t* argmax, int64_t n) {
  int32_t buf[Backend::kReadBytes / sizeof(int32_t)];
  if (n < 0 || n > static_cast<int64_t>(Backend::kReadBytes / sizeof(int32_t)))
    fail(ErrorCode::kInternal, "paged collect: " + std::to_string(n) + " rows");
  backend(device).read_wait(ticket, buf);
  std::copy(buf, buf + n, argmax);
}

void decoder_forward_paged(const DecoderParts& d, PagedKVPool& pool, const std::vector<Model::PagedRow>& rows) {
  if (rows.empty()) return;
  check_pool(d, pool);
  if (paged_decode_step(d, pool, rows)) return;
  const auto t0 = StepProfile::Clock::now();
  StepProfile& prof = StepProfile::get();
  const PagedSpec& ps = pool.spec();
  const int64_t bs = ps.block_size;
  const bool cuda = d.device != Device::kCPU;
  const bool cuda_fast = cuda && !d.batch_invariant;
  Batch b;
  // Host integers of the step, uploaded once: ids, positions, kv slots, selected rows, the paged
  // rows' tables and the gather slots of long rows. Each section is a view of one device buffer.
  std::vector<int32_t> slots, sel, q_off, q_cnt, kv_len, gather;
  std::vector<size_t> paged, long_rows;
  std::vector<int64_t> gather_off;
  int64_t max_blocks = 1, max_q = 1, max_len = 1;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Model::PagedRow& r = rows[i];
    check_row(d, r.ids, r.t, r.start);
    check_blocks(ps, r);
    const int64_t len = r.start + r.t;
    b.offset.push_back(b.total);
    b.count.push_back(r.t);
    b.start.push_back(r.start);
    b.ids.insert(b.ids.end(), r.ids, r.ids + r.t);
    for (int64_t p = r.start; p < len; ++p)
      slots.push_back(static_cast<int32_t>((*r.blocks)[static_cast<size_t>(p / bs)] * bs + p % bs));
    if (wants_output(r)) sel.push_back(static_cast<int32_t>(b.total + r.t - 1));
    if (cuda_fast && r.t > kPagedMaxQuery) {
      long_rows.push_back(i);
      gather_off.push_back(static_cast<int64_t>(gather.size()));
      for (int64_t p = 0; p < len; ++p)
        gather.push_back(static_cast<int32_t>((*r.blocks)[static_cast<size_t>(p / bs)] * bs + p % bs));
    } else {
      paged.push_back(i);
      q_off.push_back(static_cast<int32_t>(b.total));
      q_cnt.push_back(static_cast<int32_t>(r.t));
      kv_len.push_back(static_cast<int32_t>(len));
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      max_q = std::max(max_q, r.t);
      max_len = std::max(max_len, len);
    }
    b.total += r.t;
  }
  plan_rows(d, b);
  std::vector<int32_t> table(paged.size() * static_cast<size_t>(max_blocks), 0);
  for (size_t k = 0; k < paged.size(); ++k) {
    const std::vector<int32_t>& bl = *rows[paged[k]].blocks;
    const int64_t need = (int64_t{kv_len[k]} + bs - 1) / bs;
    std::copy(bl.begin(), bl.begin() + need, table.begin() + static_cast<int64_t>(k) * max_blocks);
  }
  int64_t longest = 1;
  for (size_t k = 0; k < long_rows.size(); ++k) longest = std::max(longest, b.start[long_rows[k]] + b.count[long_rows[k]]);
  std::vector<int32_t> iota(long_rows.empty() ? 0 : static_cast<size_t>(longest));
  for (size_t k = 0; k < iota.size(); ++k) iota[k] = static_cast<int32_t>(k);

  std::vector<int32_t> all;
  std::vector<int64_t> at;
  for (const std::vector<int32_t>* part : {&b.ids, &b.pos, &slots, &sel, &q_off, &q_cnt, &kv_len, &table, &gather, &iota}) {
    at.push_back(static_cast<int64_t>(all.size()));
    all.insert(all.end(), part->begin(), part->end());
  }
  at.push_back(static_cast<int64_t>(all.size()));
  Tensor dev = upload_i32(all, d.device);
  auto part = [&](int idx) { return dev.slice_rows(at[static_cast<size_t>(idx)], at[static_cast<size_t>(idx) + 1]); };
  b.ids_dev = part(0);
  b.pos_dev = part(1);
  Tensor slots_dev = part(2), sel_dev = part(3), gather_dev = part(8), iota_dev = part(9);
  PagedAttentionRows pr;
  pr.q_offset = part(4);
  pr.q_count = part(5);
  pr.kv_len = part(6);
  pr.block_table = part(7).reshape({static_cast<int64_t>(paged.size()), max_blocks});
  pr.block_size = bs;
  pr.max_q_count = max_q;
  pr.max_kv_len = max_len;

  const auto t1 = StepProfile::Clock::now();
  prof.begin(d.device);
  AttentionFn attend = [&](int64_t layer, const AttentionParams& p, Tensor& q3, Tensor& k3, const Tensor& v3, Tensor& o3,
                           const RopeArgs* rope, const RowScale* scale) {
    Tensor& kp = pool.keys(layer);
    Tensor& vp = pool.values(layer);
    if (scale) {
      ops::rms_scaled_rope_kv_write(q3, k3, v3, *scale->x, scale->eps, b.pos_dev, *rope, slots_dev, kp, vp);
    } else if (rope) {
      ops::rope_kv_write(q3, k3, v3, b.pos_dev, *rope, slots_dev, kp, vp);
    } else {
      ops::kv_write(k3, slots_dev, kp);
      ops::kv_write(v3, slots_dev, vp);
    }
    prof.mark(StepProfile::kRopeKv);
    if (!paged.empty()) ops::paged_attention(q3, kp, vp, pr, p.args, o3);
    for (size_t k = 0; k < long_rows.size(); ++k) {
      const size_t r = long_rows[k];
      const int64_t a = b.offset[r], e = a + b.count[r], len = b.start[r] + b.count[r];
      Tensor kr = Tensor::empty({kp.dim(0), len, kp.dim(2)}, kp.dtype(), d.device);
      Tensor vr = Tensor::empty({vp.dim(0), len, vp.dim(2)}, vp.dtype(), d.device);
      const Tensor gs = gather_dev.slice_rows(gather_off[k], gather_off[k] + len);
      ops::kv_gather(kp, gs, kr);
      ops::kv_gather(vp, gs, vr);
      Tensor os = o3.slice_rows(a, e);
      ops::attention(q3.slice_rows(a, e), kr, vr, b.pos_dev.slice_rows(a, e), iota_dev.slice_rows(0, len), p.args, os);
    }
    prof.mark(StepProfile::kAttn);
  };
  // On CUDA: rope + KV write in one launch when all rows share rope arguments, and the fused
  // projections when every row goes through paged_attention (it takes row-strided q).
  LayerPlan plan;
  plan.attend_ropes = cuda && b.shared_rope;
  plan.fuse = plan.attend_ropes && long_rows.empty();
  plan.fold = plan.fuse && d.folded && !d.batch_invariant;
  Tensor out = run_layers(d, b, sel_dev, static_cast<int64_t>(sel.size()), attend, plan);
  prof.mark(StepProfile::kHead);
  const auto t2 = StepProfile::Clock::now();
  if (!sel.empty()) deliver(d, rows, out, nullptr);
  prof.step(static_cast<int64_t>(rows.size()), false, t0, t1, t2, StepProfile::Clock::now());
}

}  // namespace mlxb
