// The engine: the shared machinery every array reads through (thread pool, CPU slots,
// descriptor cache, decoded-chunk cache, decode buffers, counters) and the source I/O that
// decides every request to the files (source_io.h).
// Reading an array is array/reader.h's; the open HDF5 files and their metadata are
// h5lib/h5files.h's.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/engine/threadpool.h"

namespace h5d {

class BufferPool;
class FdCache;
class ChunkCache;
class SourceIo;
class Storage;

struct EngineOptions {
  unsigned threads = std::thread::hardware_concurrency();  // decode threads (CPU slots)
  // Source reads in flight for one file at once (the pool's per-file limit; the pool has twice
  // as many workers, so a file whose reads hang leaves as many to the others). 0: the default,
  // kDefaultIoDepth. docs/architecture.md, "The I/O path", says why.
  unsigned io_depth = 0;
  uint64_t cache_bytes = 0;        // decoded-chunk cache budget; 0 = default (1/8 of RAM, <= 4 GiB)
  unsigned max_open_files = 128;   // descriptors kept open (HDF5 handles are bounded alike)
  bool vds_missing_fill = false;   // true: a missing VDS source reads as fill (libhdf5's way)
};

// Counters of what the core does to serve reads, shown in .h5direct/stats.json (the reads and
// bytes answered, spliced and pushed are counted by vfs: vfs::ReadCounters). Relaxed atomics:
// they are statistics, not state.
struct Stats {
  std::atomic<uint64_t> chunks_decoded{0};
  std::atomic<uint64_t> bytes_decoded{0};  // what those chunks decoded to
  std::atomic<uint64_t> decode_ns{0};  // time decoding chunks (inside a CPU slot), summed over threads
  std::atomic<uint64_t> chunks_prefetched{0};
  std::atomic<uint64_t> prefetch_dropped{0};  // decode-ahead tasks whose bytes the reader had read first
  std::atomic<uint64_t> prefetch_capped_bytes{0};  // decode-ahead not asked for: no room in the chunk cache
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  std::atomic<uint64_t> bytes_pread{0};
  // The data path's source requests (preads of chunks, byte runs and read-ahead pieces): how
  // many, how many served several chunks at once (merged), the most in flight at once seen, and
  // the bytes read ahead of a stream into the source's page cache (readahead_bytes, not counted
  // in bytes_pread) or found there already (readahead_resident_bytes: no request made).
  std::atomic<uint64_t> source_requests{0};
  std::atomic<uint64_t> merged_requests{0};
  std::atomic<uint64_t> source_in_flight{0};
  std::atomic<uint64_t> source_in_flight_max{0};
  std::atomic<uint64_t> readahead_bytes{0};
  std::atomic<uint64_t> readahead_resident_bytes{0};
  std::atomic<uint64_t> library_reads{0};

  void note_fallback(const std::string& reason);
  std::map<std::string, uint64_t> fallbacks() const;

 private:
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards fallbacks_
  std::map<std::string, uint64_t> fallbacks_;
};

class Engine {
 public:
  explicit Engine(EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  static constexpr unsigned kDefaultIoDepth = 32;

  const EngineOptions& options() const { return opts_; }
  ThreadPool& pool() { return *pool_; }
  // CPU-bound work (decoding, encoding) holds a slot: at most `threads` at once.
  CpuGate& cpu() { return *cpu_; }
  FdCache& fds() { return *fds_; }
  // Every request to the source files (source_io.h).
  SourceIo& io() { return *io_; }
  ChunkCache& cache() { return *cache_; }
  BufferPool& buffers() { return *buffers_; }  // for decoded chunks
  Stats& stats() { return stats_; }
  // Bytes of decode-ahead asked for and not yet done (array/reader.h: decode_ahead_room).
  std::atomic<uint64_t>& prefetch_pending() { return prefetch_pending_; }

 private:
  EngineOptions opts_;
  Stats stats_;
  std::unique_ptr<CpuGate> cpu_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<FdCache> fds_;
  std::unique_ptr<ChunkCache> cache_;
  std::atomic<uint64_t> prefetch_pending_{0};  // bytes of decode-ahead planned and not yet done
  std::unique_ptr<BufferPool> buffers_;
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<SourceIo> io_;
};

}  // namespace h5d
