#include "core/engine/engine.h"

#include <sys/stat.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/metadata.h"
#include "core/log.h"

namespace h5d {

void Stats::note_fallback(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  ++fallbacks_[reason];
}

std::map<std::string, uint64_t> Stats::fallbacks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return fallbacks_;
}

namespace {
uint64_t default_cache_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t ram = (pages > 0 && page > 0) ? uint64_t(pages) * uint64_t(page) : (8ull << 30);
  return std::min<uint64_t>(ram / 8, 4ull << 30);
}
}  // namespace

namespace {
// Decoded chunks are typically 128 KiB to a few MiB, right at or above glibc's mmap threshold:
// every decode would mmap a fresh buffer and munmap it on eviction, paying page faults and page
// zeroing on each (a third of the CPU of a decode, measured with perf; +20% decode rate pinned
// to one core without it). Keep such buffers on the heap instead, unless the user tuned malloc
// through the environment. The trim threshold stays small (1 MiB) so that freed heap returns to
// the system: the load test's memory bound held at 68 MiB with it, 76 MiB with 4 MiB.
void tune_malloc_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 1 << 20);
  });
}
}  // namespace

Engine::Engine(EngineOptions opts) : opts_(opts) {
  tune_malloc_once();
  if (opts_.threads == 0) opts_.threads = std::max(1u, std::thread::hardware_concurrency());
  if (opts_.cache_bytes == 0) opts_.cache_bytes = default_cache_bytes();
  if (opts_.io_depth == 0) opts_.io_depth = kDefaultIoDepth;
  // Where libhdf5 runs, chosen once: helper processes, or this one where the program links the
  // helper-side library (metadata.h).
  if (!opts_.helper.path.empty()) {
    meta_ = make_remote_metadata(*this, opts_.helper);
  } else if (LocalMetadataFactory make = local_metadata_factory()) {
    meta_ = make(*this);
  } else {
    fail(EINVAL, "this program has no libhdf5 of its own: it needs the HDF5 helper (h5direct-helper)");
  }
  cpu_ = std::make_unique<CpuGate>(opts_.threads);
  // One file's tasks may hold io_depth workers (or `threads`, so that one file still decodes on
  // every core); the pool has twice that, so a file whose reads hang leaves as many to others.
  const unsigned per_file = std::max(opts_.io_depth, opts_.threads);
  pool_ = std::make_unique<ThreadPool>(2 * per_file, per_file, opts_.threads);
  fds_ = std::make_unique<FdCache>(opts_.max_open_files);
  cache_ = std::make_unique<ChunkCache>(opts_.cache_bytes);
  // Idle decode buffers on top of the cache budget: an eighth of it, at most 64 MiB; 4 MiB of
  // each size in use kept touched ahead.
  buffers_ = std::make_unique<BufferPool>(std::min<uint64_t>(opts_.cache_bytes / 8, 64ull << 20),
                                          4ull << 20);
}

Engine::~Engine() {
  pool_->shutdown();  // join workers before the caches they use go away (their last tasks may use the pool)
  pool_.reset();
  std::map<std::string, std::shared_ptr<H5File>> files;  // destroyed after files_mu_ is released (lock order)
  {
    std::lock_guard<std::mutex> lk(files_mu_);
    files.swap(files_);
  }
}

HelperPool* Engine::helpers() { return meta_->pool(); }

std::shared_ptr<H5File> Engine::open_file(const std::string& path) {
  // One stat: a file that changed on disk since its H5File was made gets a new one (metadata,
  // chunk maps and decoded chunks are then read anew); arrays of the old one fail with ESTALE.
  struct stat st;
  const bool present = ::stat(path.c_str(), &st) == 0;
  std::shared_ptr<H5File> stale;  // destroyed after files_mu_ is released (lock order)
  {
    std::lock_guard<std::mutex> lk(files_mu_);
    auto it = files_.find(path);
    if (it != files_.end()) {
      // A deleted file keeps its H5File: its reads fail with ESTALE.
      if (!present || it->second->identity() == identity_of(st)) return it->second;
      stale = std::move(it->second);
      files_.erase(it);
    }
  }
  if (stale) log::info(path + ": changed on disk; its metadata is read again");
  auto f = std::make_shared<H5File>(*this, path);
  std::lock_guard<std::mutex> lk(files_mu_);
  auto [it, inserted] = files_.emplace(path, f);
  return it->second;
}

void Engine::forget_file(const std::string& path) {
  std::shared_ptr<H5File> gone;  // destroyed after files_mu_ is released (lock order)
  std::lock_guard<std::mutex> lk(files_mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  gone = std::move(it->second);
  files_.erase(it);
}

uint64_t Engine::request_size(uint64_t bytes) const {
  return std::clamp<uint64_t>(bytes / std::max(1u, opts_.io_depth), kMinRequest, kMaxRequest);
}

uint64_t Engine::request_end(uint64_t at, uint64_t piece, uint64_t end) {
  constexpr uint64_t a = kMinRequest;
  if (end <= at) return end;
  piece = std::max(a, (piece + a / 2) / a * a);
  const uint64_t cut = (at + piece) / a * a;  // > at, since piece >= a
  return cut >= end || end - cut < a ? end : cut;
}

void Engine::run(ReadPlan& plan) {
  pool_->run_all(plan.tasks, plan.common_key());
  plan.keys.clear();
}

void Engine::source_read(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what) {
  counted_read(fd, buf, n, off, what, !source_resident(fd, off, n));
}

void Engine::source_read_split(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what,
                               uint64_t piece, uint64_t key) {
  piece = std::max(piece, kMinRequest);
  const bool cold = !source_resident(fd, off, n);
  if (n <= piece || !cold) {
    counted_read(fd, buf, n, off, what, cold);
    return;
  }
  const uint64_t count = (n + piece - 1) / piece;
  const uint64_t each = (n + count - 1) / count;  // about equal
  std::vector<std::function<void()>> tasks;
  auto* out = static_cast<uint8_t*>(buf);
  for (uint64_t at = off; at < off + n;) {
    const uint64_t cut = request_end(at, each, off + n);
    tasks.push_back([this, fd, dst = out + (at - off), len = cut - at, at, &what] {
      counted_read(fd, dst, len, at, what, /*cold=*/true);
    });
    at = cut;
  }
  pool_->run_all(tasks, key);
}

bool Engine::read_into_page_cache(int fd, uint64_t off, uint64_t n, const std::string& what, ReadKind kind) {
  if (n == 0 || source_resident(fd, off, n)) return false;
  thread_local std::vector<uint8_t> scratch;  // at most kMaxScratchRequest per worker
  if (scratch.size() < n) scratch.resize(n);
  counted_read(fd, scratch.data(), n, off, what, /*cold=*/true, kind);
  return true;
}

void Engine::counted_read(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what, bool cold,
                          ReadKind kind) {
  const uint64_t now = stats_.source_in_flight.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t max = stats_.source_in_flight_max.load(std::memory_order_relaxed);
  while (now > max && !stats_.source_in_flight_max.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
  }
  struct Done {
    std::atomic<uint64_t>& c;
    ~Done() { c.fetch_sub(1, std::memory_order_relaxed); }
  } done{stats_.source_in_flight};
  const bool dbg = log::debug_enabled();
  const auto t0 = dbg ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  {
    // A read the page cache cannot answer waits for the storage: another worker may start
    // meanwhile (that is the I/O depth). One it can answer is a copy: the worker keeps its place.
    std::optional<ThreadPool::Waiting> waiting;
    if (cold) waiting.emplace();
    pread_exact(fd, buf, n, off, what);
  }
  stats_.source_requests.fetch_add(1, std::memory_order_relaxed);
  (kind == ReadKind::ReadAhead ? stats_.readahead_bytes : stats_.bytes_pread).fetch_add(n, std::memory_order_relaxed);
  if (dbg) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log::debug("source read " + what + " at " + std::to_string(off) + " (" + std::to_string(n) + " bytes): " +
               std::to_string(ms) + " ms, " + std::to_string(now) + " in flight");
  }
}

void Engine::read_region(const Array& a, const Region& r, const DestView& dst) {
  ReadPlan plan;
  plan.request = request_size(r.elements() * a.dtype().itemsize);
  a.plan(r, dst, plan);
  run(plan);
}

void Engine::read_bytes(const Array& a, uint64_t off, uint64_t len, uint8_t* out) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  const Shape& shape = a.shape();
  const auto strides = c_strides(shape, E);

  // Whole elements [m0, m1) go straight to `out`; partial elements at either end go through a
  // one-element scratch buffer.
  uint64_t m0 = (off + E - 1) / E, m1 = (off + len) / E;
  std::vector<uint8_t> head, tail;
  const uint64_t e_head = off / E, e_tail = (off + len) / E;
  const bool has_head = off % E != 0;
  const bool has_tail = (off + len) % E != 0 && !(has_head && e_tail == e_head);
  if (has_head) head.resize(E);
  if (has_tail) tail.resize(E);

  ReadPlan plan;
  plan.request = request_size(len);
  auto plan_elems = [&](uint64_t e0, uint64_t e1, uint8_t* base_for_e0) {
    for_each_region_in_range(shape, e0, e1, [&](const Region& r) {
      uint64_t flat = 0;
      for (size_t k = 0; k < shape.size(); ++k) flat += r.start[k] * static_cast<uint64_t>(strides[k]);
      DestView d{base_for_e0 + (flat - e0 * E), strides};
      a.plan(r, d, plan);
    });
  };
  if (has_head) plan_elems(e_head, e_head + 1, head.data());
  if (m1 > m0) plan_elems(m0, m1, out + (m0 * E - off));
  if (has_tail) plan_elems(e_tail, e_tail + 1, tail.data());
  run(plan);
  if (has_head) {
    uint64_t skip = off - e_head * E;
    std::memcpy(out, head.data() + skip, std::min<uint64_t>(E - skip, len));
  }
  if (has_tail) {
    uint64_t n = (off + len) - e_tail * E;
    std::memcpy(out + (len - n), tail.data(), n);
  }
}

bool Engine::bytes_decoded(const Array& a, uint64_t off, uint64_t len) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return false;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  bool all = true;
  for_each_region_in_range(a.shape(), off / E, (off + len + E - 1) / E,
                           [&](const Region& r) { all = all && a.decoded(r); });
  return all;
}

uint64_t Engine::decode_ahead_room() const {
  const uint64_t budget = cache_->budget();
  const uint64_t room = budget - std::min(budget, cache_->used()) + cache_->used_consumed();
  // Asked for and not decoded yet, it is not in the cache but will be: without it, the reads
  // that follow one another while it decodes each found the room free and asked for it again.
  const uint64_t pending = prefetch_pending_.load(std::memory_order_relaxed);
  return room > pending ? (room - pending) / 2 : 0;
}

namespace {

// Decode-ahead bytes planned and not yet done (Engine::prefetch_pending_): each task takes its
// share off when it ends (the shares add up to the whole), the last owner (the batch, run or
// rejected) what tasks that never ran left.
struct PendingPrefetch {
  std::atomic<uint64_t>& total;
  std::atomic<uint64_t> left;
  PendingPrefetch(std::atomic<uint64_t>& t, uint64_t n) : total(t), left(n) { total.fetch_add(n, std::memory_order_relaxed); }
  ~PendingPrefetch() { total.fetch_sub(left.load(), std::memory_order_relaxed); }
  void done(uint64_t n) {
    left.fetch_sub(n, std::memory_order_relaxed);
    total.fetch_sub(n, std::memory_order_relaxed);
  }
};

}  // namespace

void Engine::prefetch_bytes(const Array& a, uint64_t off, uint64_t len, std::shared_ptr<const ReadCover> cover) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  const uint64_t end = off + len;
  ReadPlan plan;
  plan.request = request_size(len);
  const auto plan_range = [&](uint64_t lo, uint64_t hi) {
    for_each_region_in_range(a.shape(), lo / E, (hi + E - 1) / E, [&](const Region& r) { a.plan_prefetch(r, plan); });
  };
  if (!cover) {
    plan_range(off, end);
  } else {
    for (uint64_t lo = off; lo < end;) {
      // Pieces end where a decode unit ends, so that a chunk is planned in one piece.
      uint64_t hi = std::min(lo + kPrefetchPiece, end);
      const ByteSpan u = a.decode_span(hi - 1);
      if (!u.empty()) hi = std::max(hi, u.hi);
      hi = std::min((hi + E - 1) / E * E, end);
      const size_t first = plan.tasks.size();
      plan_range(lo, hi);
      for (size_t i = first; i < plan.tasks.size(); ++i)
        plan.tasks[i] = [this, cover, lo, hi, t = std::move(plan.tasks[i])] {
          if (cover->covers(lo, hi)) {
            stats_.prefetch_dropped.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          t();
        };
      lo = hi;
    }
  }
  if (plan.tasks.empty()) return;
  auto pending = std::make_shared<PendingPrefetch>(prefetch_pending_, len);
  const uint64_t count = plan.tasks.size();
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t share = len / count + (k < len % count ? 1 : 0);
    auto& task = plan.tasks[k];
    task = [pending, share, t = std::move(task)] {
      struct Done {
        PendingPrefetch& p;
        uint64_t n;
        ~Done() { p.done(n); }
      } done{*pending, share};
      t();
    };
  }
  pool_->try_run_detached(std::move(plan.tasks), 64, plan.common_key());
}

}  // namespace h5d
