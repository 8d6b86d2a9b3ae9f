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
#include "core/engine/source_io.h"
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
  storage_ = std::make_unique<FdStorage>(*fds_);
  io_ = std::make_unique<SourceIo>(*this, *storage_);
}

Engine::~Engine() {
  pool_->shutdown();  // join workers before the caches they use go away (their last tasks may use the pool)
  pool_.reset();
}


}  // namespace h5d
