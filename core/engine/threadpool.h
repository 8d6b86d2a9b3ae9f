// A fixed pool of worker threads that runs batches of independent tasks. The thread that asks
// for a batch helps run it, so nested waits never deadlock and one core is never idle waiting.
// Detached batches (prefetch) run only on workers and are dropped, not queued, when the queue is
// full (backpressure: speculative work never piles up).
//
// The workers are the read path's I/O depth (docs/architecture.md, "The I/O path"): most of a
// read task's time on slow storage is a blocking pread, so the pool has more workers than cores
// and the CPU-bound part of a task (decoding) takes a CpuGate slot. A batch may carry a key (the
// source file its tasks all read): at most `per_key` workers run tasks of one key at once, so a
// file whose reads hang (tape behind dCache, a stuck server) holds at most that many workers and
// the others keep serving every other file. The caller of run_all always runs its own batch, key
// or not, so a reader is never left without a thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace h5d {

// A counting semaphore for CPU-bound work (decoding, encoding): at most `slots` holders at once,
// whatever the number of threads doing I/O. Waiting holds no lock of ours.
// A reader's own work (`urgent`: the chunk a FUSE request waits for) takes the next free slot
// before decode-ahead does: ahead of a stream the pool keeps every slot busy, and a reader that
// queued behind it would wait for work done for its future.
class CpuGate {
 public:
  explicit CpuGate(unsigned slots) : free_(slots ? slots : 1) {}
  class Slot {
   public:
    explicit Slot(CpuGate& g, bool urgent = false) : g_(g) { g_.acquire(urgent); }
    ~Slot() { g_.release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    CpuGate& g_;
  };

 private:
  void acquire(bool urgent);
  void release();
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf
  // One waiter is woken per freed slot (an urgent one first): dozens of I/O workers may wait
  // here, and waking them all at each decode cost more than the decode on two cores.
  std::condition_variable urgent_cv_, normal_cv_;
  unsigned free_;
  unsigned urgent_waiting_ = 0;
};

class ThreadPool {
 public:
  // `per_key`: how many workers may run tasks of one keyed batch's key at once (0: no limit).
  explicit ThreadPool(unsigned threads, unsigned per_key = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs all tasks (on the workers and the calling thread) and returns when all have finished.
  // If any task throws, the remaining unstarted tasks are skipped and the first exception is
  // rethrown here. Such batches are queued ahead of detached ones: a reader waits, a prefetch
  // does not. `key` (0: none) limits the workers that join it (see above).
  void run_all(std::vector<std::function<void()>>& tasks, uint64_t key = 0);

  // Queues tasks to run in the background; returns false (and runs nothing) when more than
  // `max_pending` detached batches are already waiting. Exceptions are swallowed (logged by the
  // tasks themselves where useful).
  bool try_run_detached(std::vector<std::function<void()>> tasks, size_t max_pending = 64, uint64_t key = 0);

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }
  unsigned per_key() const { return per_key_; }
  // The most workers seen running tasks at once (statistics).
  unsigned busy_max() const { return busy_max_.load(std::memory_order_relaxed); }

 private:
  struct Batch;
  void worker_loop();
  static void work_on(Batch& b);
  void wake(size_t n);  // wakes up to n idle workers
  // The first queued batch a worker may join (its key below the limit), or null. Under mu_.
  std::shared_ptr<Batch> pick_locked();

  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards queue_, stop_, detached_pending_, running_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queue_;  // synchronous batches first, then detached ones
  size_t detached_pending_ = 0;
  bool stop_ = false;
  unsigned per_key_ = 0;
  std::unordered_map<uint64_t, unsigned> running_;  // workers in a task of each key
  unsigned busy_ = 0;
  std::atomic<unsigned> busy_max_{0};
  std::vector<std::thread> workers_;
};

}  // namespace h5d
