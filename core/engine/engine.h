// The engine: the shared machinery every array reads through (thread pool, CPU slots,
// descriptor cache, decoded-chunk cache, decode buffers, counters) and its source requests.
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

struct EngineOptions {
  unsigned threads = std::thread::hardware_concurrency();  // decode threads (CPU slots)
  // Source reads in flight for one file at once (the pool's per-file limit; the pool has twice
  // as many workers, so a file whose reads hang leaves as many to the others). 0: the default,
  // kDefaultIoDepth. docs/architecture.md, "The I/O path", says why.
  unsigned io_depth = 0;
  uint64_t cache_bytes = 0;        // decoded-chunk cache budget; 0 = default (1/8 of RAM, <= 4 GiB)
  unsigned max_open_files = 128;   // descriptors kept open (HDF5 handles are bounded alike)
  uint64_t contiguous_split = 8ull << 20;  // large contiguous reads are split into jobs this size
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

  // Source requests: at least this large when a read is split over the I/O depth (the kernel's
  // own default read-ahead window, 128 KiB: what it deems worth one request to any storage),
  // and at most kMaxRequest straight into a reader's buffer (GPFS stops overlapping reads larger
  // than ~48 MiB: cold-storage.md) or kMaxScratchRequest into a buffer of ours (merged
  // compressed chunks, read-ahead): that bounds the memory of a request in flight.
  static constexpr uint64_t kMinRequest = 128ull << 10;
  static constexpr uint64_t kMaxRequest = 32ull << 20;
  static constexpr uint64_t kMaxScratchRequest = 1ull << 20;
  static constexpr unsigned kDefaultIoDepth = 32;

  const EngineOptions& options() const { return opts_; }
  ThreadPool& pool() { return *pool_; }
  // CPU-bound work (decoding, encoding) holds a slot: at most `threads` at once.
  CpuGate& cpu() { return *cpu_; }
  // The size of one source request for a read of `bytes`: spread over the I/O depth (one wave
  // of requests in flight is the fastest a latency-bound store can serve them), within
  // [kMinRequest, kMaxRequest].
  uint64_t request_size(uint64_t bytes) const;
  // Where a source request that starts at file offset `at` and should be about `piece` bytes
  // ends, not past `end`: on a multiple of kMinRequest in the file (the piece rounded to whole
  // such blocks, at least one), or at `end` when less than a block would be left after it.
  // Clients cut what they send to the storage into requests of a power of two from where a read
  // starts (FUSE 128 KiB, NFS's rsize, GPFS and Lustre blocks): a piece of 153 KB from an
  // unaligned offset was a request of 128 KiB and another of 25 KB on the emulated storage
  // (1,500 requests for 157 MB where 1,200 do), and two pieces sharing a page read it twice or
  // wait for each other.
  static uint64_t request_end(uint64_t at, uint64_t piece, uint64_t end);
  // A source read of the data path: pread_exact, counted (source_requests, bytes_pread, the
  // depth reached) and, with -o debug, logged when slow.
  void source_read(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what);
  // The same read, split into pieces of about `piece` bytes (at least kMinRequest, cut where
  // request_end says) read in parallel on the pool when it is larger and the page cache lacks it: one
  // large stored chunk then costs one round trip, not its size over one request's bandwidth
  // (the split a long contiguous run gets). `key`: the file's pool key.
  void source_read_split(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what, uint64_t piece,
                         uint64_t key);
  // Which byte counter a source request adds to: the data path's (bytes_pread: chunks, byte
  // runs, the chunk index) or read-ahead's (readahead_bytes).
  enum class ReadKind { Data, ReadAhead };
  // Brings [off, off + n) of the source into its page cache: nothing when it is there already,
  // otherwise one source request into a per-worker scratch buffer (n < kMaxScratchRequest +
  // kMinRequest: a piece that request_end let reach the end of its range),
  // counted as `kind`. For read-ahead and hints: returns whether it read.
  bool read_into_page_cache(int fd, uint64_t off, uint64_t n, const std::string& what, ReadKind kind);
  FdCache& fds() { return *fds_; }
  ChunkCache& cache() { return *cache_; }
  BufferPool& buffers() { return *buffers_; }  // for decoded chunks
  Stats& stats() { return stats_; }
  // Bytes of decode-ahead asked for and not yet done (array/reader.h: decode_ahead_room).
  std::atomic<uint64_t>& prefetch_pending() { return prefetch_pending_; }

 private:
  // source_read once residency is known (`cold`: the page cache cannot answer it, so the worker
  // waits for the storage and another may start meanwhile).
  void counted_read(int fd, void* buf, uint64_t n, uint64_t off, const std::string& what, bool cold,
                    ReadKind kind = ReadKind::Data);

  EngineOptions opts_;
  Stats stats_;
  std::unique_ptr<CpuGate> cpu_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<FdCache> fds_;
  std::unique_ptr<ChunkCache> cache_;
  std::atomic<uint64_t> prefetch_pending_{0};  // bytes of decode-ahead planned and not yet done
  std::unique_ptr<BufferPool> buffers_;
};

}  // namespace h5d
