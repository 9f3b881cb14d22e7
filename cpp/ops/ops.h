// The backend-neutral op API that model graphs call. Each op dispatches on the device of its
// output tensor to that device's Backend (cpu/ is the reference, cuda/ must agree with it).
//
// Conventions shared by every op (a backend may assume them; callers must meet them):
// - Activations are row-major and contiguous unless an op says otherwise. On CPU activations are
//   float32; on CUDA float32 or bfloat16/float16 (the op reads the dtype of its tensors).
// - Linear weights are [N, K] row-major (Hugging Face layout) in f32, bf16 or f16; results are
//   accumulated in float32.
// - Positions are int32 tensors on the same device as the data.
// - Every op writes into an output its caller allocated; in-place is allowed where noted.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace mlxb {

enum class Activation : uint8_t { kSiLU, kGeluExact, kGeluTanh };

// Rotary embedding parameters after scaling rules were applied (see models/rope.h): the op only
// rotates. inv_freq has rot_dim/2 float32 entries on the data's device.
struct RopeArgs {
  Tensor inv_freq;        // f32 [rot_dim / 2]
  int64_t rot_dim = 0;    // rotated leading part of head_dim (partial rotary when < head_dim)
  bool interleaved = false;  // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  float mscale = 1.0f;    // cos/sin multiplier (YaRN / longrope attention factor)
};

// RMSNorm of an op that normalises its input row on the fly (the rms_norm op's arguments).
struct NormArgs {
  Tensor w;
  float eps = 1e-6f;
  bool add_one = false;
};

// Heads of a fused [q; k; v] projection (norm_qkv_rope).
struct QkvShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

struct AttentionArgs {
  float scale = 1.0f;      // applied to q·k
  float softcap = 0.0f;    // > 0: s = softcap * tanh(s / softcap) before the mask (Gemma 2)
  int64_t window = 0;      // > 0: key visible only if q_pos - k_pos < window (sliding window)
  bool causal = true;      // key visible only if k_pos <= q_pos
  // Optional i32 [1] on the data's device: no slot at or after kv_len[0] holds a key visible to
  // these queries (a hint that lets a backend skip them; captured decode steps pass it because
  // their S is the cache capacity, not the length). Results are the same with or without it.
  Tensor kv_len;
  // Optional i32 [1] on the data's device: the one slot that the ops just before this call wrote
  // (a decode step's new key); every other slot was written earlier. A hint that lets a backend
  // start reading those before the ops before it have finished. Results are the same without it.
  Tensor fresh_slot;
};

// The rows of a paged attention call (the engine's batched step; see Backend::paged_attention).
// All tensors i32 on the op's device. Row r's queries are its last q_count[r] positions: query i
// of row r is at position kv_len[r] - q_count[r] + i.
struct PagedAttentionRows {
  Tensor q_offset;     // [R]: row r's queries are q rows [q_offset[r], q_offset[r] + q_count[r])
  Tensor q_count;      // [R], >= 1
  Tensor kv_len;       // [R]: row r's keys are its positions [0, kv_len[r]), kv_len[r] >= q_count[r]
  Tensor block_table;  // [R, max_blocks]: position p of row r is in pool slot
                       // block_table[r, p / block_size] * block_size + p % block_size
  int64_t block_size = 0;
  int64_t max_q_count = 0;  // max over q_count (bounds the launch)
  int64_t max_kv_len = 0;   // max over kv_len
};

// One row of Backend::sample: the chain of engine/sampler.h (logit bias -> repetition / presence /
// frequency penalties -> temperature == 0: argmax | temperature -> top-k -> top-p -> min-p -> draw
// with `uniform` from the renormalised rest; ties rank to the lower id). `special` lists each token
// with a bias and/or a penalty count once (unique ids), in host memory.
struct SampleSpecial {
  int32_t token = 0;
  int32_t count = 0;   // occurrences in the penalty window (0: bias only)
  float bias = 0.f;    // added first
  int32_t has_bias = 0;
};
struct SampleArgs {
  int64_t row = 0;                  // row of the logits
  double temperature = 0.0;         // 0: greedy
  double inv_temperature = 0.0;     // 1 / temperature (the host sampler's double)
  int64_t top_k = 0;                // 0 or >= vocab: off
  double top_p = 1.0, min_p = 0.0;
  double repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0;
  double uniform = 0.0;             // the draw, in [0, 1)
  const SampleSpecial* special = nullptr;
  int64_t n_special = 0;
};
// What comes back per row: the token, and whether the draw used `uniform` (kSampleDrew) or there
// was nothing to draw from (greedy, or one candidate left: kSampleSingle). kSampleNaN: the row has
// NaN logits (token = the first one); kSampleNoToken: every logit is -inf.
enum SampleStatus : int32_t { kSampleDrew = 0, kSampleSingle = 1, kSampleNaN = -1, kSampleNoToken = -2 };
struct SampleOut {
  int32_t token = 0;
  int32_t status = 0;
};
// The largest top_k Backend::sample takes on CUDA (larger: sample on the host).
constexpr int64_t kDeviceMaxTopK = 1024;

// MLX affine-quantized linear weight: w = scale * q + bias per group of `group_size` along K.
// q packed little-endian into uint32 words exactly as MLX packs them ([N, K * bits / 32]);
// scales/biases [N, K / group_size] in f16/bf16/f32.
struct QuantWeight {
  Tensor packed;
  Tensor scales;
  Tensor biases;
  int bits = 4;
  int group_size = 64;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  // 0: `packed` is row-major [N, K * bits / 32]. 8: the CPU's decode layout (Backend::prepare_qweight;
  // 4-bit, groups a multiple of 64, K % 128 == 0, N % 8 == 0): the same tensor shape and bytes, each
  // run of 8 rows stored where those rows were, as pairs of 64-element blocks (64 bytes per row) of
  // the 8 rows in turn, so a decode tile of 8 rows is one sequential stream (quant::packed_row reads
  // a row back). Scales and biases stay row-major.
  int tile = 0;
};

// Device work recorded once and replayed (a CUDA graph). Memory the recorded ops allocated
// belongs to the graph and keeps its address until the graph is destroyed.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void launch() = 0;  // queues one replay on the backend's stream
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // --- memory
  virtual void* alloc(int64_t bytes) = 0;
  virtual void free(void* p) = 0;
  // Copies between host and this device (or within it); `dst_dev`/`src_dev` say which side is which.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, int64_t bytes) = 0;
  // Sets `bytes` bytes of this device's memory at p to zero (queued in order with the ops).
  virtual void zero(void* p, int64_t bytes) = 0;
  virtual void synchronize() = 0;
  // Small reads the host collects later, so it can queue more work before it waits: read_later
  // queues a copy of `bytes` (at most kReadBytes) bytes at this device's address `src` behind the
  // work queued so far and returns a ticket; read_wait(ticket, dst) blocks until that copy has
  // landed and writes the bytes to host memory `dst`. A ticket is read once; tickets older than
  // the last kReadSlots are gone (kInternal). The default copies at once (read_wait only hands the
  // bytes over).
  static constexpr int64_t kReadBytes = 1024, kReadSlots = 64;
  virtual int64_t read_later(const void* src, int64_t bytes);
  virtual void read_wait(int64_t ticket, void* dst);

  // A dense weight [N, K] in the layout this backend's matmul and embedding read fastest, made once
  // when a model loads (the CPU's four-row blocks for bf16 weights on its bf16-dot path); the
  // tensor itself where there is none. Only matmul and embedding are given such a weight.
  virtual Tensor prepare_weight(const Tensor& w) { return w; }
  // Rows [r0, r1) of a weight made by prepare_weight, in the same layout (a view, no copy); an
  // undefined tensor where the layout cannot cut there.
  virtual Tensor prepared_rows(const Tensor& prepared, int64_t r0, int64_t r1) { return prepared.slice_rows(r0, r1); }
  // The same for a quantized weight (the CPU's 8-row tiles of 4-bit weights, QuantWeight::tile);
  // rows of it are taken with quant::row_view.
  virtual QuantWeight prepare_qweight(const QuantWeight& w) { return w; }

  // --- ops (shapes in comments; see the conventions above)
  // y[M,N] = x[M,K] · w[N,K]^T (+ bias[N])
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  // y[M,N] = x[M,K] · dequant(w)[N,K]^T (+ bias[N])
  virtual void qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y) = 0;
  // out[T,H] = dequant(table)[ids[t], :] * scale
  virtual void qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out) = 0;
  // out[T,H] = table[ids[t], :] * scale   (table f32/bf16/f16; ids i32 [T])
  virtual void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) = 0;
  // y = x / rms(x) * (add_one ? 1 + w : w), per row of the last dim; x may alias y
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y) = 0;
  // y = (x - mean) / sqrt(var + eps) * w + b (b optional), per row; x may alias y
  virtual void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) = 0;
  // In place on x [T, H, D]: rotates the first rot_dim of each head by positions[t]
  virtual void rope(Tensor& x, const Tensor& positions, const RopeArgs& args) = 0;
  // Row softmax over the last dim; x may alias y
  virtual void softmax(const Tensor& x, Tensor& y) = 0;
  // q [T, Hq, D]; k, v [Hkv, S, D] with dim-0 stride >= S*D (cache views); q_pos i32 [T];
  // k_pos i32 [S] (slot positions, < 0 = empty slot). out [T, Hq, D]. Hq % Hkv == 0 (GQA).
  // On CUDA q may be a row-strided view (heads contiguous), e.g. the q columns of a fused q/k/v.
  // Every slot of k and v must hold finite values, empty and masked ones too: the CUDA kernels
  // weigh them by exactly 0 (0 x NaN = NaN), so caches start zeroed (kv/storage.cc).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const AttentionArgs& args, Tensor& out) = 0;
  // out[T,F] = act(gate) * up
  virtual void gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) = 0;
  // out = a + b (same shape); out may alias a or b
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // x = cap * tanh(x / cap), in place
  virtual void softcap(Tensor& x, float cap) = 0;
  // cache[h, slots[t], :] = src[t, h, :] for src [T, H, D], cache [H, S, D] (dim-0 stride any)
  virtual void kv_write(const Tensor& src, const Tensor& slots, Tensor& cache) = 0;
  // dst = src converted to dst's dtype (same shape, contiguous)
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  // out[h, i, :] = cache[h, slots[i], :] for cache [H, S, D] (dim-0 stride any), slots i32 [N],
  // out [H, N, D] contiguous (dtype conversion allowed)
  virtual void kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out) = 0;
  // Attention of R sequences over a paged pool in one call: q [T, Hq, D] (the rows' tokens back
  // to back, see PagedAttentionRows), k, v pools [Hkv, S, D] (contiguous rows, dim-0 stride
  // >= S*D), out [T, Hq, D]. Each query gets what `attention` gives it over its row's keys
  // gathered in position order (same scale, soft-cap, causal and window rules). On CUDA q may
  // also be row-strided (heads contiguous, row stride >= Hq * D: a view of a fused projection).
  virtual void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                               const AttentionArgs& args, Tensor& out) = 0;

  // --- additive ops with generic defaults (a backend may fuse them)
  // x = x + branch, then y = rms_norm(x) (the sum rounded to x's dtype first, as add then rms_norm)
  virtual void add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y);
  // out[r] = index of the first maximum of row r of x [R, N] (i32 [R]); NaN never wins
  virtual void argmax(const Tensor& x, Tensor& out);
  // One token per entry of `rows` from logits [R, V] (float dtypes) under that entry's SampleArgs;
  // out (host) gets rows.size() results. The generic op takes a contiguous float32 CPU tensor and
  // runs the chain with a full sort (a reference); CUDA samples where the logits are (top_k <=
  // kDeviceMaxTopK) and copies back only the results. Ties of the sums decide the same way up to
  // float rounding (the order of summation differs).
  virtual void sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out);
  // out[M,F] = act(gate) * up with gate = x·w[0:F]^T, up = x·w[F:2F]^T (+ the matching halves of
  // bias [2F]) for a fused [gate; up] weight w [2F, K]: the results of matmul then gated_act
  // (gate and up rounded to out's dtype first)
  virtual void gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out);
  // gated_matmul for a fused quantized [gate; up] weight w (2F rows): the results of qmatmul on
  // the two row halves, then gated_act
  virtual void qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out);
  // rope(q), rope(k), then kv_write(k, slots, k_cache) and kv_write(v, slots, v_cache): the
  // attention inputs of a step prepared in one pass (same results as the four ops). On CUDA q,
  // k and v may be row-strided views (heads contiguous), e.g. column ranges of a fused projection.
  virtual void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args,
                             const Tensor& slots, Tensor& k_cache, Tensor& v_cache);
  // rope_kv_write(q, k, v, positions, rope, slots, k_cache, v_cache), then paged_attention(q,
  // k_cache, v_cache, rows, args, out): the same out and caches (q and k are left un-rotated when a
  // backend fuses the two; CUDA does for bf16 decode rows, rotating in the attention kernel).
  virtual void rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope,
                                    const Tensor& slots, Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows,
                                    const AttentionArgs& args, Tensor& out);
  // One-row (decode) projections fused with their neighbours; each gives the results of the ops
  // it names, bit for bit (a backend that cannot fuse a case runs those ops):
  // resid[1,N] += x[1,K]·w^T (+ bias): matmul into a temporary, then add(resid, it, resid)
  virtual void matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid);
  // y[1,N] = rms_norm(x)·w^T (+ bias): rms_norm into a temporary of x's dtype, then matmul
  virtual void norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y);
  // out[1,F] = gated_matmul(rms_norm(x), w [2F, K], bias, act)
  virtual void norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act,
                                 Tensor& out);
  // qkv[1, (H + 2 Hkv) D] = norm_matmul(x, norm, w, bias), then rope of its q and k heads (one
  // position, positions i32 [1]); when slots (i32 [1]) is defined, kv_write of its k and v heads
  // into k_cache / v_cache [Hkv, S, D] at slots[0] as well
  virtual void norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                             const Tensor& positions, const RopeArgs& rope, const Tensor& slots, Tensor& k_cache,
                             Tensor& v_cache, Tensor& qkv);
  // The same three one-row fusions for MLX affine-quantized weights, bit for bit the ops they name:
  // resid += qmatmul(x, w) (qmatmul into a temporary, then add)
  virtual void qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid);
  // y = qmatmul(rms_norm(x), w) (rms_norm into a temporary of x's dtype)
  virtual void norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y);
  // out = qgated_matmul(rms_norm(x), w [2F rows], bias, act)
  virtual void norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act,
                                  Tensor& out);

  // --- projections of un-normalised rows, for a model whose RMSNorm weights were folded into the
  // weights of the projections after them (models/fold_norms.h): s[t] = 1 / sqrt(mean(x[t]^2) + eps)
  // is the scale that RMSNorm would give residual row t of x [T, H].
  // resid[M,N] += x[M,K]·w^T, the sum in float32 rounded once where the backend can (CUDA through
  // cuBLASLt); the generic op is matmul into a temporary, then add.
  virtual void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid);
  // Rows t of q, k and v (projections of x's row t) times s[t], then rope_kv_write. The generic op
  // (CPU tensors) rounds the scaled rows to their dtype first; CUDA rotates the scaled values.
  virtual void rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                                        const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache);
  // out[t, j] = act(s[t] h[t, j]) * (s[t] h[t, F + j]) for h [T, 2F] (a fused [gate; up] projection
  // of x's rows), out [T, F]
  virtual void rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out);

  // --- capture (optional). Between begin_capture() and end_capture() the calling thread's ops
  // are recorded instead of run, and what they allocate comes from an arena owned by the graph;
  // nothing may be copied to or from the host in between. begin_capture() returns false when
  // the backend cannot capture; after an exception in between, abort_capture() discards it.
  virtual bool begin_capture() { return false; }
  virtual std::unique_ptr<DeviceGraph> end_capture();
  virtual void abort_capture() {}

 protected:
  // For read_later forms: fails (kInvalidArgument) unless 1 <= bytes <= kReadBytes.
  static void check_read_bytes(int64_t bytes);
  // The slot of `ticket` among kReadSlots when `next` tickets were given; kInternal when it is
  // unknown or expired.
  static int64_t read_slot(int64_t ticket, int64_t next);
};

// The backend for a device. cpu always exists; cuda throws kNotBuilt when not compiled in and
// kUnsupported when no GPU is present.
Backend& backend(Device device);
bool cuda_built();
bool cuda_available();

namespace ops {
// Free functions dispatching on the output tensor's device.
void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
Tensor prepare_weight(const Tensor& w);  // on w's device (Backend::prepare_weight)
Tensor prepared_rows(const Tensor& prepared, int64_t r0, int64_t r1);  // Backend::prepared_rows
QuantWeight prepare_qweight(const QuantWeight& w);                      // on w's device (Backend::prepare_qweight)
void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out);
void qmatmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& y);
void qembedding(const QuantWeight& table, const Tensor& ids, float scale, Tensor& out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, bool add_one, Tensor& y);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y);
void rope(Tensor& x, const Tensor& positions, const RopeArgs& args);
void softmax(const Tensor& x, Tensor& y);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const Tensor& k_pos, const AttentionArgs& args, Tensor& out);
void gated_act(const Tensor& gate, const Tensor& up, Activation act, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void softcap(Tensor& x, float cap);
void kv_write(const Tensor& src, const Tensor& slots, Tensor& cache);
void convert(const Tensor& src, Tensor& dst);
void kv_gather(const Tensor& cache, const Tensor& slots, Tensor& out);
void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedAttentionRows& rows,
                     const AttentionArgs& args, Tensor& out);
void add_rms_norm(Tensor& x, const Tensor& branch, const Tensor& w, float eps, bool add_one, Tensor& y);
void argmax(const Tensor& x, Tensor& out);
void sample(const Tensor& logits, const std::vector<SampleArgs>& rows, SampleOut* out);
void gated_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& out);
void qgated_matmul(const Tensor& x, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out);
void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& args, const Tensor& slots,
                   Tensor& k_cache, Tensor& v_cache);
void rope_paged_attention(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const RopeArgs& rope, const Tensor& slots,
                          Tensor& k_cache, Tensor& v_cache, const PagedAttentionRows& rows, const AttentionArgs& args, Tensor& out);
void matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& resid);
void norm_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Tensor& y);
void norm_gated_matmul(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, Activation act, Tensor& out);
void norm_qkv_rope(const Tensor& x, const NormArgs& norm, const Tensor& w, const Tensor* bias, const QkvShape& shape,
                   const Tensor& positions, const RopeArgs& rope, const Tensor& slots, Tensor& k_cache, Tensor& v_cache, Tensor& qkv);
void qmatmul_add(const Tensor& x, const QuantWeight& w, const Tensor* bias, Tensor& resid);
void norm_qmatmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Tensor& y);
void norm_qgated_matmul(const Tensor& x, const NormArgs& norm, const QuantWeight& w, const Tensor* bias, Activation act, Tensor& out);
void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& resid);
void rms_scaled_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& x, float eps, const Tensor& positions,
                              const RopeArgs& args, const Tensor& slots, Tensor& k_cache, Tensor& v_cache);
void rms_scaled_gated_act(const Tensor& h, const Tensor& x, float eps, Activation act, Tensor& out);
}  // namespace ops

}  // namespace mlxb
