#include "core/engine/threadpool.h"

#include <algorithm>
#include <chrono>

namespace h5d {

void CpuGate::acquire(bool urgent) {
  std::unique_lock<std::mutex> lk(mu_);
  if (free_ > 0) {  // nobody waits while a slot is free: release hands slots to waiters
    --free_;
    return;
  }
  Waiter w;
  (urgent ? urgent_ : normal_).push_back(&w);
  w.cv.wait(lk, [&] { return w.granted; });
}

void CpuGate::release() {
  std::lock_guard<std::mutex> lk(mu_);
  std::deque<Waiter*>& q = !urgent_.empty() ? urgent_ : normal_;
  if (q.empty()) {
    ++free_;
    return;
  }
  Waiter* w = q.front();
  q.pop_front();
  w->granted = true;
  w->cv.notify_one();
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

namespace {
thread_local ThreadPool* t_worker_of = nullptr;  // the pool whose worker this thread is
}  // namespace

ThreadPool::Waiting::Waiting(Why why) : pool_(t_worker_of) {
  if (!pool_) return;
  std::lock_guard<std::mutex> lk(pool_->mu_);
  // Its CPU place is free now: another worker may take a queued task. Every waiting worker frees
  // one place, whatever the count was (waking only when the count fell from `cpu` let two
  // workers waiting on the storage leave one place filled: 3 reads in flight, not the depth).
  --pool_->active_;
  if (pool_->cpu_ && pool_->active_ < pool_->cpu_ && !pool_->queue_.empty())
    pool_->wake_locked(1, why == Why::Storage);
}

ThreadPool::Waiting::~Waiting() {
  if (!pool_) return;
  std::lock_guard<std::mutex> lk(pool_->mu_);
  ++pool_->active_;
}

ThreadPool::ThreadPool(unsigned threads, unsigned per_key, unsigned cpu)
    : per_key_(per_key), cpu_(cpu), max_workers_(threads ? threads : 1) {
  // With a CPU limit, workers beyond it start when they are needed: when a worker waits for the
  // source and a task is waiting for a worker (wake_locked). Where the source answers at once
  // the pool stays at `cpu` threads.
  const unsigned first = cpu_ ? std::min(max_workers_, cpu_) : max_workers_;
  std::lock_guard<std::mutex> lk(mu_);
  idle_.reserve(max_workers_);
  workers_.reserve(max_workers_);
  for (unsigned i = 0; i < first; ++i) spawn_locked();
}

void ThreadPool::spawn_locked() {
  const unsigned i = static_cast<unsigned>(workers_.size());
  idle_slots_.push_back(std::make_unique<IdleSlot>());
  workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() { shutdown(); }

unsigned ThreadPool::started() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<unsigned>(workers_.size());
}

void ThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    wake_locked(workers_.size());
  }
  for (auto& t : workers_)
    if (t.joinable()) t.join();
}

void ThreadPool::work_on(Batch& b) {
  for (size_t i; (i = b.next.fetch_add(1)) < b.tasks.size();) b.run(i);
}

void ThreadPool::wake(size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  // Only as many as may take a task now; the others are woken as places free up.
  if (cpu_) n = std::min<size_t>(n, active_ < cpu_ ? cpu_ - active_ : 0);
  wake_locked(n);
}

void ThreadPool::wake_locked(size_t n, bool may_spawn) {
  // Workers between two tasks (neither idle nor in a task) look at the queue before they sleep:
  // they take what is queued without being woken, so no new worker starts for it (on warm data,
  // where workers are seldom idle, starting one for every such moment grew the pool to 32-56
  // threads and tripled the context switches of a read).
  const size_t between = workers_.size() - idle_.size() - busy_;
  // The most recently idle first: its buffers and stack are warm, and the pool's extra workers
  // (there for the source's latency) stay asleep while the source answers at once.
  for (; n > 0 && !idle_.empty(); --n) {
    IdleSlot& s = *idle_slots_[idle_.back()];
    idle_.pop_back();
    s.woken = true;
    s.cv.notify_one();
  }
  // None idle: a new worker, if there is work for it and the pool may grow.
  if (!may_spawn || n <= between) return;
  for (n -= between; n > 0 && !stop_ && workers_.size() < max_workers_ && !queue_.empty(); --n) spawn_locked();
}

std::shared_ptr<ThreadPool::Batch> ThreadPool::pick_locked() {
  if (cpu_ && active_ >= cpu_) return nullptr;
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

void ThreadPool::worker_loop(unsigned me) {
  t_worker_of = this;
  IdleSlot* slot;
  {
    std::lock_guard<std::mutex> lk(mu_);
    slot = idle_slots_[me].get();
  }
  IdleSlot& idle = *slot;
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
        idle.woken = false;
        idle_.push_back(me);
        if (!stop_) {
          idle.cv.wait(lk, [&] { return idle.woken || stop_; });
        } else {
          // Shutting down with batches still queued that this worker may not take yet (the CPU
          // places are taken, or the key's): look again shortly. Returning at once made every
          // idle worker spin on mu_, starving the tasks that empty the queue (the TSan stress
          // test hung in Engine::~Engine and was killed for memory).
          idle.cv.wait_for(lk, std::chrono::milliseconds(1), [&] { return idle.woken; });
        }
        if (!idle.woken) {  // not taken off the idle list by a waker: take itself off
          auto it = std::find(idle_.begin(), idle_.end(), me);
          if (it != idle_.end()) idle_.erase(it);
        }
      }
      if (b->key) ++running_[b->key];
      ++active_;
      if (++busy_ > busy_max_.load(std::memory_order_relaxed)) busy_max_.store(busy_, std::memory_order_relaxed);
    }
    b->run(i);
    {
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
      bool was_capped = active_-- == cpu_ && cpu_;
      if (b->key) {
        auto r = running_.find(b->key);
        was_capped = was_capped || (per_key_ && r->second == per_key_);
        if (--r->second == 0) running_.erase(r);
      }
      if (was_capped) wake_locked(1);  // a worker may take what this one could not
    }
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
    Waiting waiting(Why::Batch);  // a worker waiting for its nested batch leaves its place to another
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
