// Source I/O: the one module that decides what the source files are asked for.
//
// Users' data is read cold from parallel filesystems (GPFS, dCache behind it), where a request
// costs a round trip (0.2-2 ms, far more under load or from tape) plus its size over one
// stream's bandwidth and only many requests in flight make a read fast; and warm from the page
// cache, where a request is a copy. The kernel sends the daemon at most a couple of read-ahead
// windows per reader, so the concurrency against the storage comes from here.
//
// The arrays say what a read needs, as plain data: byte runs stored as they are read (ByteRun:
// contiguous data, unfiltered chunks; with their destinations), stored chunks to decode
// (ChunkJob: compressed chunks and narrow unfiltered ones, with what the array does with their
// bytes), and the runs a stream reads next (read-ahead). This module alone turns them into
// requests, and every decision about them is made here:
//   how large   request_size: a read of B bytes in requests of B / io_depth, within
//               [kMinRequest, kMaxRequest] (one wave of requests in flight is the fastest a
//               latency-bound store serves them; the bounds are the kernel's own read-ahead
//               window and the size above which GPFS stops overlapping reads);
//   where       request_end: requests start and end on multiples of kMinRequest in the file
//               (clients cut a read into power-of-two requests from where it starts);
//   merge       chunks at most a page apart share one request, up to the read's request size
//               and kMaxScratchRequest, decoded in parallel from its buffer; small runs share a
//               task;
//   split       a run, or a large chunk the page cache lacks, longer than the request size is
//               read in pieces in parallel;
//   skip        what the page cache holds costs no round trip (source_resident): a merged group
//               found cached is planned chunk by chunk, read-ahead found cached asks nothing;
//   claim       a merged request claims its chunks in the decoded-chunk cache first and reads
//               only those nobody has or is decoding, so concurrent reads of one block read it
//               once; it decodes its claims before it waits for anyone else's;
//   read ahead  a stream's next ranges, rounded out to whole blocks, each block asked once;
//   how deep    a request the page cache cannot answer waits for the storage and lets another
//               worker of the pool start (ThreadPool::Waiting), up to io_depth per file.
// Nothing here depends on the storage's latency or bandwidth, which the daemon does not know:
// only on the read's size and the depth. Warm, the same requests are served from the page cache
// at once; on slow storage they are all in flight together; a file that hangs holds at most
// io_depth workers.
//
// What it asks of the storage goes through a Storage: FdStorage (descriptors of the engine's
// FdCache, pread, the page cache's residency; every read checked against the identity the
// metadata was read from, ESTALE otherwise), or in the unit tests a fake that records each
// request (tests/unit/test_source_io.cpp). docs/architecture.md, "The I/O path", draws it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/chunk_cache.h"
#include "core/engine/fd_cache.h"
#include "core/engine/read_plan.h"

namespace h5d {

class Engine;
struct Stats;

// One source file of a read: where it is, the identity its metadata was read from (a file that
// changed since fails with ESTALE), the name for messages ("file.h5:/dset"), its pool key.
struct Source {
  std::string path;
  FileIdentity id;
  std::string what;
  uint64_t key = 0;
};
using SourcePtr = std::shared_ptr<const Source>;
SourcePtr make_source(std::string path, const FileIdentity& id, std::string what);

// Bytes stored as they are read: `n` bytes at file offset `src` go to `dst` (nullptr for
// read-ahead: the range only).
struct ByteRun {
  uint64_t src;
  uint8_t* dst;
  uint64_t n;
};

// A stored chunk a read needs, and what the array does with its bytes.
struct ChunkJob {
  uint64_t addr = 0, size = 0;  // its stored bytes in the file
  ChunkKey key;                 // its entry in the decoded-chunk cache
  // Decodes its stored bytes into a new entry: `stored` points at them inside a merged request's
  // buffer, or is nullptr: then it reads them itself (SourceIo::read_stored). Throws Error.
  std::function<ChunkBytes(const uint8_t* stored)> decode;
  // A reader's part of the decoded chunk, into its destination; empty for decode-ahead.
  std::function<void(const ChunkBytes&)> deliver;
};

// What source I/O asks of the storage.
class Storage {
 public:
  virtual ~Storage() = default;
  // A descriptor of the file as `s` knows it (Error(ESTALE) when it changed, else errno).
  virtual std::shared_ptr<const OpenFd> open(const Source& s) = 0;
  // After reading: Error(ESTALE) when the file is no longer `s`'s.
  virtual void recheck(const Source& s) = 0;
  // Whether the page cache holds [off, off + n) of the file (false when it cannot tell).
  virtual bool resident(const OpenFd& fd, uint64_t off, uint64_t n) = 0;
  // Exactly n bytes at off (a short read is Error(EIO)).
  virtual void pread(const OpenFd& fd, void* buf, uint64_t n, uint64_t off) = 0;
};

// The real files, through the engine's descriptor cache.
class FdStorage final : public Storage {
 public:
  explicit FdStorage(FdCache& fds) : fds_(fds) {}
  std::shared_ptr<const OpenFd> open(const Source& s) override { return fds_.get(s.path, &s.id); }
  void recheck(const Source& s) override { fds_.recheck(s.path, s.id); }
  bool resident(const OpenFd& fd, uint64_t off, uint64_t n) override { return source_resident(fd.fd(), off, n); }
  void pread(const OpenFd& fd, void* buf, uint64_t n, uint64_t off) override { pread_exact(fd.fd(), buf, n, off, fd.path()); }

 private:
  FdCache& fds_;
};

class SourceIo {
 public:
  // Source requests are at least kMinRequest when a read is split over the I/O depth (the
  // kernel's own default read-ahead window, what it deems worth one request to any storage), at
  // most kMaxRequest straight into a reader's buffer (GPFS stops overlapping reads larger than
  // ~48 MiB: cold-storage.md) and kMaxScratchRequest into a buffer of ours (merged chunks,
  // read-ahead): that bounds the memory of a request in flight.
  static constexpr uint64_t kMinRequest = 128ull << 10;
  static constexpr uint64_t kMaxRequest = 32ull << 20;
  static constexpr uint64_t kMaxScratchRequest = 1ull << 20;
  // Stored chunks at most this far apart share a request: HDF5 aligns chunks to at most a page
  // when asked to (H5Pset_alignment), and a page more costs a store nothing.
  static constexpr uint64_t kMergeGap = 4096;

  // `engine`: the pool, CPU slots, decoded-chunk cache, decode buffers and counters the reads
  // use (its io_depth); `storage`: the files.
  SourceIo(Engine& engine, Storage& storage);
  Storage& storage() { return storage_; }

  // The size of one source request for a read of `bytes`.
  uint64_t request_size(uint64_t bytes) const;
  // Where a request that starts at file offset `at` and should be about `piece` bytes ends, not
  // past `end`: on a multiple of kMinRequest (the piece rounded to whole such blocks, at least
  // one), or at `end` when less than a block would be left after it.
  static uint64_t request_end(uint64_t at, uint64_t piece, uint64_t end);
  // [off, off + n) cut into about equal requests of about `piece` bytes (no short tail request),
  // each ending where request_end says: (offset, length) each.
  static std::vector<std::pair<uint64_t, uint64_t>> pieces(uint64_t off, uint64_t n, uint64_t piece);

  // Whether a reply may splice [off, off + n) of `fd` from the page cache: only when all of it is
  // there. A splice reads what is missing inside the request, one request at a time; cold bytes
  // go through the ordinary read instead, in requests spread over the I/O depth.
  bool may_splice(const OpenFd& fd, uint64_t off, uint64_t n) { return storage_.resident(fd, off, n); }

  // ---- Planning: what a read needs, turned into tasks of `plan` --------------------------------
  // Byte runs into their destinations: one request each, a run longer than the plan's request
  // size cut into pieces read in parallel (cut where request_end says), runs shorter than
  // kMinRequest sharing a task.
  void plan_runs(const SourcePtr& s, const std::vector<ByteRun>& runs, ReadPlan& plan);
  // A stream's next byte ranges into the source's page cache (data stored as it is read): merged,
  // rounded out to whole blocks (not past the file's end), each block asked once per plan, in
  // requests of the plan's request size (at most kMaxScratchRequest); what the page cache holds
  // costs no request.
  void plan_readahead(const SourcePtr& s, std::vector<ByteRun> runs, ReadPlan& plan);
  // Stored chunks: merged into shared requests where they lie next to each other, claimed,
  // decoded in parallel; the rest one by one through the decoded-chunk cache. `prefetch`:
  // decode-ahead (nobody waits; errors are left to the reader who asks for the chunk).
  void plan_chunks(const SourcePtr& s, std::vector<ChunkJob> jobs, ReadPlan& plan, bool prefetch);

  // ---- Reads, for tasks --------------------------------------------------------------------------
  // A chunk's stored bytes [off, off + n) into `buf`, in one request, or in pieces of about
  // `piece` bytes in parallel when it is larger and the page cache lacks it (0: one request);
  // then the file's identity is checked again.
  void read_stored(const Source& s, void* buf, uint64_t n, uint64_t off, uint64_t piece);
  // One source request: counted (source_requests, bytes_pread, the depth reached) and, with -o
  // debug, logged. `cold`: the page cache cannot answer it (the worker waits for the storage and
  // lets another start).
  enum class Kind { Data, ReadAhead };
  void read(const OpenFd& fd, void* buf, uint64_t n, uint64_t off, bool cold, Kind kind = Kind::Data);
  // Brings [off, off + n) into the source's page cache: nothing when it is there, otherwise one
  // request into a per-worker scratch buffer (n < kMaxScratchRequest + kMinRequest). Returns
  // whether it read.
  bool read_into_page_cache(const OpenFd& fd, uint64_t off, uint64_t n, Kind kind);
  // A parser's read of the file's own structures (the chunk index's nodes): one request, not
  // counted (the counters count reads of data and read-ahead).
  void read_structure(const OpenFd& fd, void* buf, uint64_t n, uint64_t off) { storage_.pread(fd, buf, n, off); }
  // A parser's hint (the chunk index's next nodes: fmt::ByteSource::prefetch): the ranges read
  // into the page cache at once, on the pool; errors are left to the parser's own reads.
  void read_ahead_ranges(const OpenFd& fd, const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

 private:
  std::function<void()> chunk_task(const SourcePtr& s, ChunkJob job, bool prefetch);
  std::function<void()> group_task(const SourcePtr& s, std::vector<ChunkJob> group, bool prefetch);

  Engine& engine_;
  Storage& storage_;
};

}  // namespace h5d
