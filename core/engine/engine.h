// The engine: the shared machinery every array reads through (thread pool, descriptor cache,
// decoded-chunk cache, counters) and the entry points that turn byte ranges into bytes.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/array/array.h"
#include "core/h5lib/h5helper.h"
#include "core/engine/threadpool.h"

namespace h5d {

class BufferPool;
class FdCache;
class ChunkCache;
class H5File;
class Metadata;

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
  HelperOptions helper;            // libhdf5 in helper processes (path set) or in this one
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

// The data bytes [lo, hi) of an array that one read stream has read or had pushed (vfs's
// SequentialPrefetcher keeps it up to date), shared with the decode-ahead the stream asked for.
// A reader that outruns the pool decodes what it reads on its own thread; the decode-ahead
// queued for those bytes would then decode them a second time once the decoded chunks have left
// the cache's consumed list, for nobody (measured: 4,000 frames read through mmap decoded up to
// 5,996 chunks). A piece of decode-ahead whose bytes the stream has covered is dropped instead.
// Relaxed reads of two atomics: a stale answer only decodes a piece once more or leaves it to
// the reader, never changes bytes.
struct ReadCover {
  std::atomic<uint64_t> lo{~0ull}, hi{0};
  void set(uint64_t l, uint64_t h) {
    lo.store(l, std::memory_order_relaxed);
    hi.store(h, std::memory_order_relaxed);
  }
  bool covers(uint64_t l, uint64_t h) const {
    return lo.load(std::memory_order_relaxed) <= l && h <= hi.load(std::memory_order_relaxed);
  }
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
  // Runs a plan's tasks on the pool (see ReadPlan::keys) and waits for them.
  void run(ReadPlan& plan);
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
  // Every question for libhdf5 (metadata.h): HDF5 helper processes (helper options set: the
  // daemon) or libhdf5 in this process (the helper itself, unit tests, tools), chosen once.
  Metadata& metadata() { return *meta_; }
  // The HDF5 helper processes (nullptr: libhdf5 runs in this process): only for the write path
  // (core/write/ spawns its writer processes with their options) and tests; the read side
  // asks metadata().
  HelperPool* helpers();

  // Opens an HDF5 file (or returns the one already open). Throws Error(ENOENT/EIO/...).
  std::shared_ptr<H5File> open_file(const std::string& path);
  // Drops what is known of `path` (its H5File: metadata, arrays, libhdf5 handle once unused);
  // the next open_file reads it anew.
  void forget_file(const std::string& path);

  // Reads bytes [off, off+len) of the C-order bytes of `a` into `out`: every chunk, file and
  // part touched is read and decoded concurrently. Errors carry file, dataset and chunk.
  void read_bytes(const Array& a, uint64_t off, uint64_t len, uint8_t* out);
  // Reads region `r` of `a` into a strided destination.
  void read_region(const Array& a, const Region& r, const DestView& dst);
  // What a decode-ahead may ask for now: half the chunk cache's room (its free bytes and those of
  // chunks read to their end, which it evicts first), less the decode-ahead asked for and not yet
  // done; half, as the cache's shards fill unevenly. Takes no lock.
  uint64_t decode_ahead_room() const;
  // Starts decoding the chunks under bytes [off, off+len) in the background (never blocks; does
  // nothing when the pool is saturated). With `cover`, the range is planned in pieces of at
  // least one decode unit and kPrefetchPiece bytes, and a piece whose bytes `cover` holds when
  // its turn comes is dropped (stats: prefetch_dropped).
  void prefetch_bytes(const Array& a, uint64_t off, uint64_t len,
                      std::shared_ptr<const ReadCover> cover = nullptr);
  // The size of a piece: small enough that a dropped piece is little decode-ahead lost, large
  // enough that planning a piece (microseconds) stays far below decoding it (>= 1 ms at the
  // ~1 GB/s one core inflates deflate).
  static constexpr uint64_t kPrefetchPiece = 1ull << 20;
  // True when bytes [off, off+len) of `a` can be read without decoding (Array::decoded).
  bool bytes_decoded(const Array& a, uint64_t off, uint64_t len);

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
  std::unique_ptr<Metadata> meta_;
  std::mutex files_mu_;  // lock level 4 (docs/architecture.md): after the HDF5 lock; guards files_
  std::map<std::string, std::shared_ptr<H5File>> files_;
};

}  // namespace h5d
