#include "core/engine/threadpool.h"

namespace h5d {

void CpuGate::acquire(bool urgent) {
  std::unique_lock<std::mutex> lk(mu_);
  if (urgent) {
    ++urgent_waiting_;
    urgent_cv_.wait(lk, [&] { return free_ > 0; });
    --urgent_waiting_;
    --free_;
    // The last urgent waiter gone and a slot still free: a deferring waiter may take it.
    if (urgent_waiting_ == 0 && free_ > 0) normal_cv_.notify_one();
  } else {
    normal_cv_.wait(lk, [&] { return free_ > 0 && urgent_waiting_ == 0; });
    --free_;
  }
}

void CpuGate::release() {
  std::lock_guard<std::mutex> lk(mu_);
  ++free_;
  if (urgent_waiting_ > 0) urgent_cv_.notify_one();
  else normal_cv_.notify_one();
}

struct ThreadPool::Batch {
  std::vector<std::function<void()>> tasks;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::atomic<bool> failed{false};
  bool detached = false;
  uint64_t key = 0;
  std::mutex mu;  // lock level 5 (docs/architecture.md), a leaf; guards error, finished
  std::condition_variable cv;
  std::exception_ptr error;
  bool finished = false;

  // Runs task i (claimed by the caller) and counts it done.
  void run(size_t i) {
    if (!failed.load(std::memory_order_relaxed)) {
      try {
        tasks[i]();
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
    std::function<void()>().swap(tasks[i]);  // release captured buffers early
    if (done.fetch_add(1) + 1 == tasks.size()) {
      std::lock_guard<std::mutex> lk(mu);
      finished = true;
      cv.notify_all();
    }
  }
};

ThreadPool::ThreadPool(unsigned threads, unsigned per_key) : per_key_(per_key) {
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on(Batch& b) {
  for (size_t i; (i = b.next.fetch_add(1)) < b.tasks.size();) b.run(i);
}

void ThreadPool::wake(size_t n) {
  if (n >= workers_.size()) {
    cv_.notify_all();
    return;
  }
  for (size_t k = 0; k < n; ++k) cv_.notify_one();
}

std::shared_ptr<ThreadPool::Batch> ThreadPool::pick_locked() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const std::shared_ptr<Batch>& b = *it;
    if (b->next.load() >= b->tasks.size()) {  // every task claimed: it leaves the queue
      if (b->detached) --detached_pending_;
      it = queue_.erase(it);
      continue;
    }
    if (b->key && per_key_) {
      auto r = running_.find(b->key);
      if (r != running_.end() && r->second >= per_key_) {
        ++it;
        continue;
      }
    }
    return b;
  }
  return nullptr;
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Batch> b;
    size_t i = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      for (;;) {
        if (stop_ && queue_.empty()) return;
        b = pick_locked();
        if (b) {
          // Claimed under mu_, so the key's count and the claim agree; the caller of run_all
          // claims without mu_, so the claim may find the batch done.
          i = b->next.fetch_add(1);
          if (i < b->tasks.size()) break;
          continue;  // pick_locked drops it next time
        }
        cv_.wait(lk);
      }
      if (b->key) ++running_[b->key];
      if (++busy_ > busy_max_.load(std::memory_order_relaxed)) busy_max_.store(busy_, std::memory_order_relaxed);
    }
    b->run(i);
    bool was_capped = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
      if (b->key) {
        auto r = running_.find(b->key);
        was_capped = per_key_ && r->second == per_key_;
        if (--r->second == 0) running_.erase(r);
      }
    }
    if (was_capped) cv_.notify_one();  // a worker may wait for this key's batches
  }
}

void ThreadPool::run_all(std::vector<std::function<void()>>& tasks, uint64_t key) {
  if (tasks.empty()) return;
  if (tasks.size() == 1) {
    tasks[0]();
    return;
  }
  auto b = std::make_shared<Batch>();
  b->tasks = std::move(tasks);
  b->key = key;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto pos = queue_.begin();  // ahead of every detached batch, behind other readers'
    while (pos != queue_.end() && !(*pos)->detached) ++pos;
    queue_.insert(pos, b);
  }
  wake(b->tasks.size() - 1);  // the caller takes one
  work_on(*b);
  {
    std::unique_lock<std::mutex> lk(b->mu);
    b->cv.wait(lk, [&] { return b->finished; });
  }
  {
    // Drop it from the queue if no worker got to it.
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == b) {
        queue_.erase(it);
        break;
      }
    }
  }
  tasks.clear();
  if (b->error) std::rethrow_exception(b->error);
}

bool ThreadPool::try_run_detached(std::vector<std::function<void()>> tasks, size_t max_pending, uint64_t key) {
  if (tasks.empty()) return true;
  auto b = std::make_shared<Batch>();
  b->tasks = std::move(tasks);
  b->detached = true;
  b->key = key;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || detached_pending_ >= max_pending) return false;
    ++detached_pending_;
    queue_.push_back(b);
  }
  wake(b->tasks.size());
  return true;
}

}  // namespace h5d
