// Fixed worker pool for parallel_for. One job at a time (a mutex serialises callers from
// different native threads). A job is cut into more chunks than threads, and every participant
// - the calling thread first of all - claims chunks from an atomic counter. The caller never
// waits for a worker to wake up: a worker that arrives late (busy machine, slow wake-up) finds
// the chunks taken and leaves; the caller only waits for chunks a running worker has claimed.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxb {
namespace {

thread_local bool tl_in_pool = false;

constexpr int kChunksPerThread = 4;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    std::lock_guard<std::mutex> job_lock(job_mu_);
    stop();
    stopping_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t max_chunks = (n + grain - 1) / grain;
    const int64_t chunks = std::min<int64_t>(static_cast<int64_t>(size()) * kChunksPerThread, max_chunks);
    if (chunks <= 1 || size() == 1 || tl_in_pool) { fn(0, n); return; }
    std::lock_guard<std::mutex> job_lock(job_mu_);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      open_ = true;
      ++generation_;
    }
    cv_.notify_all();
    tl_in_pool = true;
    work();
    tl_in_pool = false;
    std::unique_lock<std::mutex> lk(mu_);
    open_ = false;  // late workers no longer join; wait for those that did
    done_cv_.wait(lk, [this] { return active_ == 0; });
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
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (!open_) continue;
        ++active_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
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
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
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
