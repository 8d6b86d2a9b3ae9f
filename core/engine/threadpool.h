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
// Slots are handed out in order of asking, a reader's own work (`urgent`: the chunk a FUSE
// request waits for) before decode-ahead. In order, because decode-ahead asks in the stream's
// order, and a reader waiting for a chunk that a worker has claimed (the decoded-chunk cache's
// in-flight entry) waits for that worker's turn: with dozens of I/O workers at the gate, an
// unordered wake-up left the chunk the reader needed next behind the ones it needs later (warm
// full reads 30% slower). A freed slot goes straight to the next waiter (one wake-up per slot).
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
  struct Waiter {
    std::condition_variable cv;
    bool granted = false;
  };
  void acquire(bool urgent);
  void release();
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards all below
  unsigned free_;
  std::deque<Waiter*> urgent_, normal_;  // waiting, in order of asking
};

class ThreadPool {
 public:
  // `per_key`: how many workers may run tasks of one keyed batch's key at once (0: no limit).
  // `cpu`: how many workers may be busy other than waiting (on the source: `Waiting`, or for a
  // nested batch) when a worker takes a task (0: no limit). Warm, where a read returns at once,
  // that keeps `cpu` workers on the tasks, in their order; on slow storage every worker that
  // waits for the source lets another start, up to the pool's size and `per_key`: the depth
  // follows from how long the source takes, not from a setting tuned to it.
  explicit ThreadPool(unsigned threads, unsigned per_key = 0, unsigned cpu = 0);
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

  // Marks the calling thread, while it lives, as waiting (on the source): a pool worker so marked
  // does not count against `cpu`. Other threads: nothing. A wait on the storage (`Storage`) may
  // start a new worker for a queued task; a wait for the worker's own nested batch (`Batch`:
  // its tasks run on workers that hold places already) only wakes an idle one: on warm data the
  // decode-ahead's nested batches otherwise grew the pool to 56 threads and tripled the context
  // switches of a read (0.85x the speed of the binary before the I/O depth).
  enum class Why { Storage, Batch };
  class Waiting {
   public:
    explicit Waiting(Why why = Why::Storage);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    ThreadPool* pool_;
  };

  // Runs what is queued, then ends the workers (the destructor does it too). Tasks still running
  // may use the pool meanwhile (a nested batch runs on its caller): its owner calls this before
  // letting the pool go.
  void shutdown();

  // The most workers it runs (those beyond `cpu` start when the source keeps workers waiting).
  unsigned size() const { return max_workers_; }
  unsigned per_key() const { return per_key_; }
  // The workers started so far (those beyond `cpu` start only when workers wait on the storage).
  unsigned started();
  // The most workers seen running tasks at once (statistics).
  unsigned busy_max() const { return busy_max_.load(std::memory_order_relaxed); }

 private:
  struct Batch;
  void worker_loop(unsigned me);
  static void work_on(Batch& b);
  void wake(size_t n);  // wakes up to n idle workers
  void wake_locked(size_t n, bool may_spawn = true);  // under mu_
  void spawn_locked();  // under mu_
  // The first queued batch a worker may join (its key below the limit), or null. Under mu_.
  std::shared_ptr<Batch> pick_locked();

  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards queue_, stop_, detached_pending_, running_
  struct IdleSlot {
    std::condition_variable cv;
    bool woken = false;
  };
  std::vector<std::unique_ptr<IdleSlot>> idle_slots_;  // one per worker
  std::vector<unsigned> idle_;  // idle workers, the most recently idle last
  std::deque<std::shared_ptr<Batch>> queue_;  // synchronous batches first, then detached ones
  size_t detached_pending_ = 0;
  bool stop_ = false;
  unsigned per_key_ = 0;
  unsigned cpu_ = 0;
  const unsigned max_workers_;
  unsigned active_ = 0;  // workers in a task and not Waiting
  std::unordered_map<uint64_t, unsigned> running_;  // workers in a task of each key
  unsigned busy_ = 0;
  std::atomic<unsigned> busy_max_{0};
  std::vector<std::thread> workers_;
};

}  // namespace h5d
