// A fixed pool of worker threads that runs batches of independent tasks. The thread that asks
// for a batch helps run it, so nested waits never deadlock and one core is never idle waiting.
// Detached batches (prefetch) run only on workers and are dropped, not queued, when the queue is
// full (backpressure: speculative work never piles up).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace h5d {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs all tasks (on the workers and the calling thread) and returns when all have finished.
  // If any task throws, the remaining unstarted tasks are skipped and the first exception is
  // rethrown here.
  void run_all(std::vector<std::function<void()>>& tasks);

  // Queues tasks to run in the background; returns false (and runs nothing) when more than
  // `max_pending` detached batches are already waiting. Exceptions are swallowed (logged by the
  // tasks themselves where useful).
  bool try_run_detached(std::vector<std::function<void()>> tasks, size_t max_pending = 64);

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

 private:
  struct Batch;
  void worker_loop();
  static void work_on(Batch& b);

  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards queue_, stop_, detached_pending_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queue_;
  size_t detached_pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace h5d
