#include "core/engine/buffer_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <unordered_map>

namespace h5d {

struct BufferPool::State {
  State(uint64_t max_idle_, uint64_t reserve_) : max_idle(max_idle_), reserve(reserve_) {}

  struct SizeClass {
    std::vector<std::unique_ptr<Buffer>> idle;
    uint64_t last_use = 0;
  };

  const uint64_t max_idle;
  const uint64_t reserve;
  mutable std::mutex mu;  // lock level 5 (docs/architecture.md), a leaf (after ChunkCache shards); guards all below
  std::condition_variable cv;
  std::unordered_map<size_t, SizeClass> sizes;
  std::set<size_t> wanted;  // sizes the background thread should fill up
  uint64_t idle_bytes = 0;
  uint64_t clock = 0;  // a use counter: the size class used longest ago is evicted first
  bool stopping = false;
  Counters counts;

  bool pooled(size_t n) const { return n > 0 && 2 * uint64_t(n) <= max_idle; }
  size_t target(size_t n) const { return std::max<size_t>(2, reserve / n); }

  // Frees idle buffers of other sizes, least recently used first, until n more bytes fit.
  // Returns the buffers to free (outside the lock). Needs mu.
  void make_room(size_t n, std::vector<std::unique_ptr<Buffer>>& drop) {
    while (idle_bytes + n > max_idle) {
      auto victim = sizes.end();
      for (auto it = sizes.begin(); it != sizes.end(); ++it)
        if (it->first != n && !it->second.idle.empty() &&
            (victim == sizes.end() || it->second.last_use < victim->second.last_use))
          victim = it;
      if (victim == sizes.end()) return;
      auto& idle = victim->second.idle;
      while (!idle.empty() && idle_bytes + n > max_idle) {
        idle_bytes -= victim->first;
        drop.push_back(std::move(idle.back()));
        idle.pop_back();
      }
    }
  }

  void release(Buffer* raw, size_t n) {
    std::unique_ptr<Buffer> b(raw);
    std::vector<std::unique_ptr<Buffer>> drop;  // freed after the lock is let go
    std::lock_guard<std::mutex> lk(mu);
    if (stopping || b->size() != n || !pooled(n)) return;
    make_room(n, drop);
    if (idle_bytes + n > max_idle) return;
    sizes[n].idle.push_back(std::move(b));
    idle_bytes += n;
  }

  // The background thread: fills every wanted size up to its target, at the lowest priority.
  void fill_loop() {
    setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      cv.wait(lk, [&] { return stopping || !wanted.empty(); });
      if (stopping) return;
      const size_t n = *wanted.begin();
      wanted.erase(wanted.begin());
      while (!stopping && sizes[n].idle.size() < target(n) && idle_bytes + n <= max_idle) {
        lk.unlock();
        auto b = std::make_unique<Buffer>(n);  // value-initialised: every page written now
        lk.lock();
        // Buffers released while the lock was let go may have filled the budget meanwhile: the
        // bound is checked again before this one is added (freed outside the lock otherwise).
        if (stopping || idle_bytes + n > max_idle) {
          lk.unlock();
          b.reset();
          lk.lock();
          break;
        }
        sizes[n].idle.push_back(std::move(b));
        idle_bytes += n;
        ++counts.touched_ahead;
      }
    }
  }
};

BufferPool::BufferPool(uint64_t max_idle, uint64_t reserve, bool background)
    : state_(std::make_shared<State>(max_idle, reserve)) {
  if (background) thread_ = std::thread([s = state_.get()] { s->fill_loop(); });
}

BufferPool::~BufferPool() {
  std::unordered_map<size_t, State::SizeClass> idle;
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->stopping = true;
    idle.swap(state_->sizes);
    state_->idle_bytes = 0;
  }
  state_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<BufferPool::Buffer> BufferPool::get(size_t n) {
  std::unique_ptr<Buffer> b;
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.pooled(n) && !s.stopping) {
      auto& cls = s.sizes[n];
      cls.last_use = ++s.clock;
      if (!cls.idle.empty()) {
        b = std::move(cls.idle.back());
        cls.idle.pop_back();
        s.idle_bytes -= n;
        ++s.counts.reused;
      }
      if (cls.idle.size() < s.target(n) && s.wanted.insert(n).second) s.cv.notify_one();
    }
    if (!b) ++s.counts.fresh;
  }
  if (!b) b = std::make_unique<Buffer>(n);
  return std::shared_ptr<Buffer>(b.release(), [st = state_, n](Buffer* p) { st->release(p, n); });
}

BufferPool::Counters BufferPool::counters() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  Counters c = state_->counts;
  c.idle_bytes = state_->idle_bytes;
  return c;
}

}  // namespace h5d
