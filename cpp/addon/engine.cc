// JS class of the execution area: `InferenceEngine(model, options, onEvents)` wraps the native
// engine thread (engine/engine.h) running a ModelRunner over a paged KV pool. Each step's events
// reach JS through one thread-safe function call (a batch per step, no polling). The function is
// referenced only while requests are in flight, so an idle engine never keeps the process alive.
// Options arrive validated by lib/execution; they are re-checked here.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "addon/model_ref.h"
#include "addon/util.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace mlxb::addon {

// Reads NativeSamplingOptions (cpp/addon/generation.cc).
SamplingParams parse_sampling_params(Napi::Value v);

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  fail(ErrorCode::kInvalidArgument, field + " " + what, field);
}

int64_t int_field(const Napi::Object& o, const char* key, int64_t lo, int64_t hi) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) bad(key, "must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(d);
}

std::vector<int32_t> int32s(const Napi::Value& v, const char* field, bool allow_empty) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) bad(field, "must be an Int32Array");
  Napi::Int32Array a = v.As<Napi::Int32Array>();
  if (!allow_empty && a.ElementLength() == 0) bad(field, "must hold at least one token id");
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

// State shared by the JS object, the engine thread's sink and the TSFN finalizer.
struct Shared {
  std::mutex mu;
  Napi::ThreadSafeFunction tsfn;
  bool tsfn_alive = false;  // false once released (last batch) or finalized
  int64_t in_flight = 0;    // requests submitted and not yet finished
  bool referenced = false;
  bool closing = false;     // close() was called: stay referenced until the last batch
};

// Keeps the TSFN (and so the event loop) referenced exactly while requests are in flight.
void track(Shared& sh, Napi::Env env, int64_t delta) {
  std::lock_guard<std::mutex> lock(sh.mu);
  sh.in_flight += delta;
  if (!sh.tsfn_alive) return;
  const bool want = sh.in_flight > 0 || sh.closing;
  if (want && !sh.referenced) sh.tsfn.Ref(env);
  if (!want && sh.referenced) sh.tsfn.Unref(env);
  sh.referenced = want;
}

struct Batch {
  std::shared_ptr<Shared> shared;
  std::vector<StepEvent> events;
  bool last = false;
};

Napi::Object event_to_js(Napi::Env env, const StepEvent& e) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", static_cast<double>(e.seq_id));
  o.Set("token", e.token);
  if (e.token >= 0) {
    o.Set("logprob", e.sample.logprob);
    if (!e.sample.top_tokens.empty()) {
      const size_t n = e.sample.top_tokens.size();
      Napi::Int32Array tt = Napi::Int32Array::New(env, n);
      Napi::Float32Array tl = Napi::Float32Array::New(env, n);
      std::memcpy(tt.Data(), e.sample.top_tokens.data(), n * sizeof(int32_t));
      std::memcpy(tl.Data(), e.sample.top_logprobs.data(), n * sizeof(float));
      o.Set("topTokens", tt);
      o.Set("topLogprobs", tl);
    }
  }
  o.Set("generated", static_cast<double>(e.generated));
  if (e.finish != FinishReason::kNone) {
    o.Set("finish", finish_reason_name(e.finish));
    o.Set("promptTokens", static_cast<double>(e.prompt_tokens));
    o.Set("cachedTokens", static_cast<double>(e.cached_tokens));
    if (!e.error.empty()) o.Set("error", e.error);
  }
  return o;
}

class EngineWrap : public Napi::ObjectWrap<EngineWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "InferenceEngine",
                       {InstanceMethod<&EngineWrap::submit>("submit"), InstanceMethod<&EngineWrap::cancel>("cancel"),
                        InstanceMethod<&EngineWrap::stats>("stats"), InstanceMethod<&EngineWrap::close>("close")});
  }

  // new InferenceEngine(model, options, onEvents(events, last))
  explicit EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    Napi::Env env = info.Env();
    guarded(env, [&]() -> Napi::Value {
      std::shared_ptr<Model> model = unwrap_model(info.Length() > 0 ? info[0] : env.Undefined());
      if (info.Length() < 2 || !info[1].IsObject()) bad("options", "must be an object");
      if (info.Length() < 3 || !info[2].IsFunction()) bad("onEvents", "must be a function");
      Napi::Object o = info[1].As<Napi::Object>();
      SchedulerOptions so;
      so.max_rows = int_field(o, "maxRows", 1, 4096);
      so.max_queue = int_field(o, "maxQueue", 0, int64_t{1} << 24);
      so.block_size = int_field(o, "blockSize", 1, 4096);
      so.num_blocks = int_field(o, "kvBlocks", 1, int64_t{1} << 24);
      so.prefix_cache_blocks = int_field(o, "prefixCacheBlocks", 0, int64_t{1} << 24);
      so.prefill_chunk = int_field(o, "prefillChunk", 1, int64_t{1} << 20);
      so.prefill_budget = int_field(o, "prefillBudget", 1, int64_t{1} << 22);
      so.max_context = int_field(o, "maxContext", 2, int64_t{1} << 30);
      Napi::Value fp = o.Get("fingerprint");
      if (!fp.IsString()) bad("fingerprint", "must be a string");
      so.fingerprint = fp.As<Napi::String>().Utf8Value();

      const bool batch_invariant = o.Get("batchInvariant").ToBoolean().Value();
      const Napi::Value argmax_v = o.Get("deviceArgmax");
      const bool device_argmax = argmax_v.IsUndefined() || argmax_v.ToBoolean().Value();
      auto runner = std::make_unique<ModelRunner>(model, so.block_size, so.num_blocks, batch_invariant, device_argmax);
      runner_ = runner.get();
      kv_bytes_ = runner->pool().bytes();
      shared_ = std::make_shared<Shared>();
      std::shared_ptr<Shared> shared = shared_;
      shared->tsfn = Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "mlxb-engine", 0, 1,
                                                   [shared](Napi::Env) {
                                                     std::lock_guard<std::mutex> lock(shared->mu);
                                                     shared->tsfn_alive = false;
                                                   });
      shared->tsfn_alive = true;
      shared->tsfn.Unref(env);
      EventSink sink = [shared](std::vector<StepEvent>&& events, bool last) {
        std::lock_guard<std::mutex> lock(shared->mu);
        if (!shared->tsfn_alive) return;
        auto* batch = new Batch{shared, std::move(events), last};
        napi_status st = shared->tsfn.NonBlockingCall(batch, &EngineWrap::deliver);
        if (st != napi_ok) delete batch;
        if (last) {
          shared->tsfn.Release();
          shared->tsfn_alive = false;
        }
      };
      engine_ = std::make_unique<Engine>(so, std::move(runner), std::move(sink));
      return env.Undefined();
    });
  }

  ~EngineWrap() override {
    if (engine_) {
      engine_->close(true);
      engine_->join();
    }
  }

 private:
  // On the JS thread: one step's events.
  static void deliver(Napi::Env env, Napi::Function cb, Batch* batch) {
    std::unique_ptr<Batch> b(batch);
    if (!env || !cb) return;
    Napi::HandleScope scope(env);
    int64_t finished = 0;
    for (const StepEvent& e : b->events) finished += e.finish != FinishReason::kNone ? 1 : 0;
    if (finished > 0) track(*b->shared, env, -finished);
    Napi::Array arr = Napi::Array::New(env, b->events.size());
    for (size_t i = 0; i < b->events.size(); ++i) arr.Set(static_cast<uint32_t>(i), event_to_js(env, b->events[i]));
    try {
      cb.Call({arr, Napi::Boolean::New(env, b->last)});
    } catch (const Napi::Error&) {
      // lib/execution's handler never throws; this is the environment shutting down. Dropping
      // the batch is all that is left to do (the process must not terminate on it).
    }
  }

  // submit(id, prompt, maxTokens, stopTokens, sampling, adapter)
  Napi::Value submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      if (!engine_) fail(ErrorCode::kAborted, "the engine is closed");
      SeqRequest r;
      if (info.Length() < 6) bad("arguments", "submit takes (id, prompt, maxTokens, stopTokens, sampling, adapter)");
      if (!info[0].IsNumber()) bad("id", "must be a number");
      r.id = info[0].As<Napi::Number>().Int64Value();
      r.prompt = int32s(info[1], "prompt", false);
      if (!info[2].IsNumber()) bad("maxTokens", "must be a number");
      const double mt = info[2].As<Napi::Number>().DoubleValue();
      if (!(mt >= 1 && mt <= double(int64_t{1} << 30)) || mt != std::floor(mt)) bad("maxTokens", "must be an integer >= 1");
      r.max_new_tokens = static_cast<int64_t>(mt);
      r.stop_tokens = int32s(info[3], "stopTokens", true);
      SamplingParams p = parse_sampling_params(info[4]);
      if (!info[5].IsString()) bad("adapter", "must be a string");
      r.adapter = info[5].As<Napi::String>().Utf8Value();
      const int64_t vocab = runner_->model().config().vocab_size;
      for (int32_t t : r.prompt)
        if (t < 0 || t >= vocab) bad("prompt", "holds token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(vocab) + ")");
      runner_->begin(r.id, r.prompt, p);
      const int64_t id = r.id;
      try {
        engine_->submit(std::move(r));
      } catch (...) {
        runner_->forget(id);
        throw;
      }
      track(*shared_, env, 1);
      return env.Undefined();
    });
  }

  // cancel(id): the request ends with 'abort' at the next step (no-op when it already ended).
  Napi::Value cancel(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      if (!info[0].IsNumber()) bad("id", "must be a number");
      if (engine_) engine_->cancel(info[0].As<Napi::Number>().Int64Value());
      return env.Undefined();
    });
  }

  Napi::Value stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      Napi::Object o = Napi::Object::New(env);
      if (!engine_) fail(ErrorCode::kAborted, "the engine is closed");
      EngineStats s = engine_->stats();
      o.Set("running", static_cast<double>(s.sched.running));
      o.Set("waiting", static_cast<double>(s.sched.waiting));
      o.Set("blocksTotal", static_cast<double>(s.sched.blocks.total));
      o.Set("blocksUsed", static_cast<double>(s.sched.blocks.used));
      o.Set("blocksFree", static_cast<double>(s.sched.blocks.free));
      o.Set("blocksCached", static_cast<double>(s.sched.blocks.cached));
      o.Set("steps", static_cast<double>(s.sched.steps));
      o.Set("stepsAhead", static_cast<double>(s.sched.steps_ahead));
      o.Set("generatedTokens", static_cast<double>(s.sched.generated_tokens));
      o.Set("prefillTokens", static_cast<double>(s.sched.prefill_tokens));
      o.Set("cachedTokens", static_cast<double>(s.sched.cached_tokens));
      o.Set("preemptions", static_cast<double>(s.sched.preemptions));
      o.Set("tokensPerSecond", s.tokens_per_second);
      o.Set("msSinceProgress", s.ms_since_progress);
      o.Set("kvBytes", static_cast<double>(kv_bytes_));
      o.Set("closed", s.closed);
      return o;
    });
  }

  // close(abort): stops accepting; the last onEvents call has last = true.
  Napi::Value close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
      const bool abort = info.Length() > 0 && info[0].ToBoolean().Value();
      {
        // Keep the event loop alive until the engine thread's last batch arrives (close() resolves then).
        std::lock_guard<std::mutex> lock(shared_->mu);
        shared_->closing = true;
        if (shared_->tsfn_alive && !shared_->referenced) shared_->tsfn.Ref(env);
        shared_->referenced = true;
      }
      if (engine_) engine_->close(abort);
      return env.Undefined();
    });
  }

  std::unique_ptr<Engine> engine_;
  ModelRunner* runner_ = nullptr;
  std::shared_ptr<Shared> shared_;
  int64_t kv_bytes_ = 0;
};

// engineModelFacts(model, blockSize) -> { bytesPerBlock, maxPositions }
Napi::Value model_facts(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, [&]() -> Napi::Value {
    std::shared_ptr<Model> model = unwrap_model(info.Length() > 0 ? info[0] : env.Undefined());
    if (info.Length() < 2 || !info[1].IsNumber()) bad("blockSize", "must be a number");
    const int64_t bs = info[1].As<Napi::Number>().Int64Value();
    if (bs < 1 || bs > 4096) bad("blockSize", "must be an integer in [1, 4096]");
    PagedSpec s = ModelRunner::spec_for(*model, bs, 1);
    Napi::Object o = Napi::Object::New(env);
    o.Set("bytesPerBlock", s.layers == 0 ? 0.0 : static_cast<double>(PagedKVPool::bytes_per_block(s)));
    o.Set("maxPositions", static_cast<double>(model->config().max_position_embeddings));
    return o;
  });
}

void init(Napi::Env env, Napi::Object exports) {
  exports.Set("InferenceEngine", EngineWrap::define(env));
  exports.Set("engineModelFacts", Napi::Function::New(env, model_facts));
}

Registrar reg(init);

}  // namespace
}  // namespace mlxb::addon
