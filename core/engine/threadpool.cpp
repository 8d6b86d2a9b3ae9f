#include "core/engine/threadpool.h"

namespace h5d {

struct ThreadPool::Batch {
  std::vector<std::function<void()>> tasks;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::atomic<bool> failed{false};
  bool detached = false;
  std::mutex mu;  // lock level 5 (docs/architecture.md), a leaf; guards error, finished
  std::condition_variable cv;
  std::exception_ptr error;
  bool finished = false;
};

ThreadPool::ThreadPool(unsigned threads) {
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
  const size_t n = b.tasks.size();
  for (;;) {
    size_t i = b.next.fetch_add(1);
    if (i >= n) return;
    if (!b.failed.load(std::memory_order_relaxed)) {
      try {
        b.tasks[i]();
      } catch (...) {
        std::lock_guard<std::mutex> lk(b.mu);
        if (!b.error) b.error = std::current_exception();
        b.failed = true;
      }
    }
    std::function<void()>().swap(b.tasks[i]);  // release captured buffers early
    if (b.done.fetch_add(1) + 1 == n) {
      std::lock_guard<std::mutex> lk(b.mu);
      b.finished = true;
      b.cv.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Batch> b;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      b = queue_.front();
      // A batch stays at the queue's head until all its tasks are claimed, so every idle
      // worker can join it.
      if (b->next.load() + 1 >= b->tasks.size()) {
        queue_.pop_front();
        if (b->detached) --detached_pending_;
      }
    }
    work_on(*b);
  }
}

void ThreadPool::run_all(std::vector<std::function<void()>>& tasks) {
  if (tasks.empty()) return;
  if (tasks.size() == 1) {
    tasks[0]();
    return;
  }
  auto b = std::make_shared<Batch>();
  b->tasks = std::move(tasks);
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(b);
  }
  cv_.notify_all();
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

bool ThreadPool::try_run_detached(std::vector<std::function<void()>> tasks, size_t max_pending) {
  if (tasks.empty()) return true;
  auto b = std::make_shared<Batch>();
  b->tasks = std::move(tasks);
  b->detached = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || detached_pending_ >= max_pending) return false;
    ++detached_pending_;
    queue_.push_back(b);
  }
  cv_.notify_all();
  return true;
}

}  // namespace h5d
