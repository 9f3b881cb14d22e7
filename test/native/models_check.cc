// C++-only checks of the models area that JS cannot reach directly:
//  1. KV-cache legos (contiguous, rotating) under many chunk schedules: after every update the
//     view holds, for each query of the chunk, exactly the keys it may see (causal, window), with
//     the right data; capacity stays bounded; bad updates are typed errors. The same schedules
//     again with one-token chunks written as recorded decode steps do (device_layout + commit).
//  2. Rotary frequencies (models/rope.cc) against the inv_freq / attention_scaling that
//     transformers computed for each oracle fixture (oracle.json).
// Usage: models_check FIXTURE_ROOT. Prints "all models checks passed" and exits 0 on success.
// Run by test/models-native.test.ts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/json.h"
#include "kv/cache.h"
#include "models/rope.h"
#include "ops/ops.h"

#include "check.h"

using namespace mlxb;

static int failures = 0;

static void expect_error(const std::function<void()>& fn, ErrorCode code, const char* what) {
  try {
    fn();
    CHECK(false, "%s: no error", what);
  } catch (const Error& e) {
    CHECK(e.code() == code, "%s: code %s (%s)", what, error_code_name(e.code()), e.what());
  }
}

// Key value of (position, head, j); values are its negation.
static float key_of(int64_t pos, int64_t h, int64_t j) { return static_cast<float>(pos * 100 + h * 10 + j); }

// captured: one-token chunks go the way a recorded decode step writes the cache (device_layout,
// kv_write at slot pos or pos % capacity, commit) and are checked through that layout, as the
// recorded attention reads it; longer chunks still use update().
static void check_schedule(int64_t window, int64_t max_tokens, const std::vector<int64_t>& chunks, bool captured = false) {
  const int64_t hkv = 2, d = 4;
  CacheSpec spec;
  spec.kv_heads = hkv;
  spec.head_dim = d;
  spec.max_tokens = max_tokens;
  spec.window = window;
  auto cache = make_layer_cache(spec);
  int64_t at = 0, max_chunk = 0;
  for (int64_t t : chunks) {
    max_chunk = std::max(max_chunk, t);
    Tensor k = Tensor::empty({t, hkv, d}, DType::F32), v = Tensor::empty({t, hkv, d}, DType::F32);
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) {
      pos[static_cast<size_t>(i)] = static_cast<int32_t>(at + i);
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t j = 0; j < d; ++j) {
          k.ptr<float>()[(i * hkv + h) * d + j] = key_of(at + i, h, j);
          v.ptr<float>()[(i * hkv + h) * d + j] = -key_of(at + i, h, j);
        }
    }
    KVView view;
    std::vector<int32_t> layout_pos;
    if (captured && t == 1) {
      LayerCache::DeviceLayout lay;
      CHECK(cache->device_layout(1, lay), "window %lld: no device layout", (long long)window);
      CHECK(lay.ring == (window > 0 && window < max_tokens), "window %lld: ring flag %d", (long long)window, lay.ring ? 1 : 0);
      const int64_t cap = lay.capacity;
      CHECK(cap >= (lay.ring ? window : at + 1), "capacity %lld too small at %lld", (long long)cap, (long long)at);
      const int32_t slot = static_cast<int32_t>(lay.ring ? at % cap : at);
      Tensor st = Tensor::empty({1}, DType::I32);
      st.ptr<int32_t>()[0] = slot;
      Tensor kb = lay.k, vb = lay.v;
      ops::kv_write(k, st, kb);
      ops::kv_write(v, st, vb);
      cache->commit(pos.data(), 1);
      // What the recorded attention sees: slots below kv_len with their positions.
      const int64_t kv_len = lay.ring ? std::min<int64_t>(at + 1, cap) : at + 1;
      layout_pos.assign(static_cast<size_t>(cap), -1);
      for (int64_t i = 0; i < kv_len; ++i)
        layout_pos[static_cast<size_t>(i)] = lay.ring ? lay.host_pos[i] : lay.pos.ptr<int32_t>()[i];
      view.k = kb;
      view.v = vb;
      view.pos = Tensor::wrap(layout_pos.data(), {cap}, DType::I32);
    } else {
      view = cache->update(k, v, pos.data(), t);
    }
    const int64_t s = view.k.dim(1);
    CHECK(view.k.dim(0) == hkv && view.k.dim(2) == d && view.k.stride(0) >= s * d && view.k.stride(1) == d,
          "window %lld: view shape %s", (long long)window, view.k.describe().c_str());
    CHECK(view.pos.numel() == s, "pos has %lld entries for %lld slots", (long long)view.pos.numel(), (long long)s);
    const int32_t* sp = view.pos.ptr<int32_t>();
    std::map<int64_t, int64_t> slot_of;  // position -> slot (each position at most once)
    for (int64_t i = 0; i < s; ++i) {
      if (sp[i] < 0) continue;
      CHECK(slot_of.count(sp[i]) == 0, "position %d in two slots", sp[i]);
      slot_of[sp[i]] = i;
    }
    for (int64_t q = at; q < at + t; ++q) {
      const int64_t first = window > 0 ? std::max<int64_t>(0, q - window + 1) : 0;
      for (int64_t p = first; p <= q; ++p) {
        auto it = slot_of.find(p);
        CHECK(it != slot_of.end(), "window %lld chunk at %lld: query %lld cannot see position %lld", (long long)window,
              (long long)at, (long long)q, (long long)p);
        if (it == slot_of.end()) continue;
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t j = 0; j < d; ++j) {
            const float kk = view.k.ptr<float>()[h * view.k.stride(0) + it->second * d + j];
            const float vv = view.v.ptr<float>()[h * view.v.stride(0) + it->second * d + j];
            CHECK(kk == key_of(p, h, j) && vv == -key_of(p, h, j), "position %lld head %lld: wrong data", (long long)p, (long long)h);
          }
      }
    }
    for (const auto& [p, slot] : slot_of) CHECK(p < at + t, "slot holds future position %lld", (long long)p);
    at += t;
    CHECK(cache->length() == at, "length %lld, expected %lld", (long long)cache->length(), (long long)at);
  }
  if (window > 0 && window < max_tokens) {
    const int64_t bound = (window - 1 + max_chunk) * hkv * d * 4 * 2 + (window - 1 + max_chunk) * 4;
    CHECK(cache->bytes() <= bound, "rotating cache holds %lld bytes, more than window-1+chunk slots (%lld)",
          (long long)cache->bytes(), (long long)bound);
  }
}

static void check_caches() {
  const std::vector<std::vector<int64_t>> schedules = {
      std::vector<int64_t>(30, 1), {5, 11, 1, 7, 1, 1, 4}, {30}, {2, 9, 1, 1, 12, 5}, {6, 6, 6, 6, 6}, {1, 20, 1, 8}};
  for (int64_t w : {0, 1, 3, 6, 8, 40})
    for (const auto& s : schedules) {
      check_schedule(w, 30, s);
      check_schedule(w, 30, s, /*captured=*/true);
    }

  // reset, then reuse from position 0
  CacheSpec spec;
  spec.kv_heads = 1;
  spec.head_dim = 2;
  spec.max_tokens = 8;
  spec.window = 3;
  auto c = make_layer_cache(spec);
  Tensor k = Tensor::zeros({2, 1, 2}, DType::F32);
  int32_t p01[] = {0, 1}, p23[] = {2, 3}, p5[] = {5, 6};
  c->update(k, k, p01, 2);
  expect_error([&] { c->update(k, k, p5, 2); }, ErrorCode::kInvalidArgument, "rotating: skipped positions");
  c->update(k, k, p23, 2);
  c->reset();
  CHECK(c->length() == 0, "reset length");
  c->update(k, k, p01, 2);
  CHECK(c->length() == 2, "reuse after reset");

  spec.window = 0;
  auto full = make_layer_cache(spec);
  Tensor k8 = Tensor::zeros({8, 1, 2}, DType::F32);
  int32_t p8[] = {0, 1, 2, 3, 4, 5, 6, 7};
  full->update(k8, k8, p8, 8);
  int32_t p9[] = {8};
  Tensor k1 = Tensor::zeros({1, 1, 2}, DType::F32);
  expect_error([&] { full->update(k1, k1, p9, 1); }, ErrorCode::kInvalidArgument, "contiguous: past max_tokens");
  Tensor bad = Tensor::zeros({1, 2, 2}, DType::F32);
  full->reset();
  expect_error([&] { full->update(bad, bad, p8, 1); }, ErrorCode::kInvalidArgument, "contiguous: wrong head count");
  spec.kv_heads = 0;
  expect_error([&] { make_layer_cache(spec); }, ErrorCode::kInvalidArgument, "spec: zero heads");
}

static std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

static void compare_freqs(const std::string& name, const std::string& key, const RopeFreqs& f, const json::Value& dump,
                          const std::string& scale_key) {
  const json::Value* inv = dump.find(key);
  CHECK(inv && inv->is_array(), "%s: oracle has no %s", name.c_str(), key.c_str());
  if (!inv || !inv->is_array()) return;
  CHECK(static_cast<int64_t>(inv->items().size()) == f.rot_dim / 2, "%s %s: %zu frequencies, ours %lld", name.c_str(),
        key.c_str(), inv->items().size(), (long long)(f.rot_dim / 2));
  for (size_t i = 0; i < inv->items().size() && i < f.inv_freq.size(); ++i) {
    const double want = inv->items()[i].as_double(), got = f.inv_freq[i];
    CHECK(std::fabs(got - want) <= 2e-6 * std::fabs(want), "%s %s[%zu]: %.9g vs transformers %.9g", name.c_str(), key.c_str(),
          i, got, want);
  }
  if (const json::Value* sc = dump.find(scale_key))
    CHECK(std::fabs(f.mscale - sc->as_double()) <= 1e-6, "%s %s: mscale %.9g vs %.9g", name.c_str(), scale_key.c_str(),
          f.mscale, sc->as_double());
}

static void check_rope(const std::string& root) {
  const json::Value manifest = json::parse(read_file(root + "/manifest.json"));
  int checked = 0;
  for (const auto& [name, files] : manifest.find("fixtures")->members()) {
    const std::string dir = root + "/" + name;
    const ModelConfig cfg = load_model_config(dir);
    const json::Value oracle = json::parse(read_file(dir + "/oracle.json"));
    const json::Value& at_load = *oracle.find("rope_inv_freq_at_load");
    const json::Value& after = *oracle.find("rope_inv_freq_after_prompt");
    const int64_t prompt = static_cast<int64_t>(oracle.find("prompt_ids")->items().size());
    if (cfg.rope_local) {
      compare_freqs(name, "model.rotary_emb.full_attention_inv_freq", rope_freqs(cfg.rope, cfg.head_dim, cfg.max_position_embeddings, 0),
                    at_load, "model.rotary_emb.full_attention_attention_scaling");
      compare_freqs(name, "model.rotary_emb.sliding_attention_inv_freq",
                    rope_freqs(*cfg.rope_local, cfg.head_dim, cfg.max_position_embeddings, 0), at_load,
                    "model.rotary_emb.sliding_attention_attention_scaling");
    } else {
      compare_freqs(name, "model.rotary_emb.inv_freq", rope_freqs(cfg.rope, cfg.head_dim, cfg.max_position_embeddings, 0),
                    at_load, "model.rotary_emb.attention_scaling");
      // after the teacher-forced prompt (dynamic NTK rescales for a longer sequence)
      compare_freqs(name + " after prompt", "model.rotary_emb.inv_freq",
                    rope_freqs(cfg.rope, cfg.head_dim, cfg.max_position_embeddings, prompt), after,
                    "model.rotary_emb.attention_scaling");
    }
    ++checked;
  }
  CHECK(checked >= 10, "only %d fixtures checked", checked);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: models_check FIXTURE_ROOT\n");
    return 2;
  }
  try {
    check_caches();
    check_rope(argv[1]);
  } catch (const std::exception& e) {
    std::printf("FAIL: unexpected exception: %s\n", e.what());
    ++failures;
  }
  if (failures) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  std::printf("all models checks passed\n");
  return 0;
}
