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

}  // namespace h5d
