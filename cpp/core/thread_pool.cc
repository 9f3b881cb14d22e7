// Fixed worker pool for parallel_for. One job at a time (a mutex serialises callers from
// different native threads). A job is cut into more chunks than threads, and every participant
// - the calling thread first of all - claims chunks from an atomic counter. The caller never
// waits for a worker to wake up: a worker that arrives late (busy machine, slow wake-up) finds
// the chunks taken and leaves; the caller only waits for chunks a running worker has claimed.
// Between jobs a worker spins for a short while (kSpin) before it sleeps on the condition
// variable: decode runs hundreds of short jobs per token with a few microseconds of serial work
// between them, and a futex wake-up costs more than most of those jobs. The caller only
// signals the condition variable when some worker is actually asleep.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxb {
namespace {

thread_local bool tl_in_pool = false;

constexpr int kChunksPerThread = 4;
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    std::lock_guard<std::mutex> job_lock(job_mu_);
    stop();
    stopping_ = false;
    stopping_flag_.store(false, std::memory_order_relaxed);
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t max_chunks = (n + grain - 1) / grain;
    const int64_t chunks = std::min<int64_t>(static_cast<int64_t>(size()) * kChunksPerThread, max_chunks);
    if (chunks <= 1 || size() == 1 || tl_in_pool) { fn(0, n); return; }
    std::lock_guard<std::mutex> job_lock(job_mu_);
    bool wake = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      open_ = true;
      generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_all();
    tl_in_pool = true;
    work();
    tl_in_pool = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_ = false;  // late workers no longer join; wait for those that did
    }
    // Running workers finish their chunks within microseconds: spin before sleeping.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; active_.load(std::memory_order_acquire) != 0; ++i) {
      cpu_relax();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
    }
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return active_.load(std::memory_order_relaxed) == 0; });
    fn_ = nullptr;
  }

 private:
  // Claims and runs chunks until none are left.
  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks_) return;
      const int64_t begin = n_ * c / chunks_, end = n_ * (c + 1) / chunks_;
      if (begin < end) (*fn_)(begin, end);
    }
  }

  void loop() {
    tl_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      // Spin a while for the next job, then sleep.
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int i = 0; generation_.load(std::memory_order_acquire) == seen && !stopping_flag_.load(std::memory_order_relaxed); ++i) {
        cpu_relax();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
      }
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (generation_.load(std::memory_order_relaxed) == seen && !stopping_) {
          ++sleepers_;
          cv_.wait(lk, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
          --sleepers_;
        }
        if (stopping_) return;
        seen = generation_.load(std::memory_order_relaxed);
        if (!open_) continue;
        active_.fetch_add(1, std::memory_order_relaxed);
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (active_.fetch_sub(1, std::memory_order_release) == 1) done_cv_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      stopping_flag_.store(true, std::memory_order_relaxed);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex job_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  // The current job; written under mu_ before generation_ changes, read by participants that
  // joined it (under mu_) while it was open.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  bool open_ = false;
  std::atomic<int> active_{0};
  std::atomic<uint64_t> generation_{0};  // written under mu_, read by spinning workers without it
  int sleepers_ = 0;                      // workers waiting on cv_ (under mu_)
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};
};

int default_threads() {
  if (const char* env = std::getenv("MLXB_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // never destroyed: workers may outlive statics
  return *p;
}

}  // namespace

int num_threads() { return pool().size(); }
void set_num_threads(int n) { pool().resize(std::max(1, n)); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  pool().run(n, grain, fn);
}

}  // namespace mlxb
