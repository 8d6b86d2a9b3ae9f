// The one abstraction every view is built from: an N-d array whose regions can be planned into
// independent tasks (pread + decode + copy), so that a read spanning many chunks, files or
// modules runs them all at once on the pool. Datasets (contiguous, chunked, compact, virtual),
// EuXFEL key arrays (concatenations of row blocks) and in-memory arrays all implement it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/vocab/dtype.h"
#include "core/array/region.h"
#include "core/engine/fd_cache.h"
#include "core/engine/read_plan.h"

namespace h5d {

class ThreadPool;

// Bytes [lo, hi) of an array's C-order bytes.
struct ByteSpan {
  uint64_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};

// A file an array reads its bytes from, with the identity its metadata was read from (ino 0:
// not known yet: a part of a concatenation not opened).
struct SourceFile {
  std::string path;
  FileIdentity id;
};

// Bytes stored verbatim in a source file: n bytes at file offset `file_off` of `fd` (held open
// while the run is in use).
struct FileRun {
  std::shared_ptr<const OpenFd> fd;
  uint64_t file_off = 0, n = 0;
};

class Array {
 public:
  virtual ~Array() = default;
  virtual const Shape& shape() const = 0;
  virtual const DType& dtype() const = 0;
  // Adds to `plan` the tasks that write region `r` (inside shape()) to `dst`. Planning itself
  // does no data I/O (metadata such as a chunk map may be loaded on first use).
  virtual void plan(const Region& r, const DestView& dst, ReadPlan& plan) const = 0;
  // Adds tasks that only warm the decoded-chunk cache for region `r` (sequential prefetch).
  // Default: nothing to warm.
  virtual void plan_prefetch(const Region& r, ReadPlan& plan) const {}
  // For logs and error messages: "file.h5:/path/to/dset".
  virtual std::string describe() const = 0;
  // The decode unit around byte `off` of the array's C-order bytes: the contiguous bytes
  // [lo, hi) (lo <= off < hi) that a read touching `off` decodes in full (one compressed chunk's
  // run of bytes), so that the rest of them is cheap to serve once any of them was read. Empty
  // when there is no such unit: uncompressed data, or a composite whose mapping does not keep a
  // part's unit contiguous (each override says which). Never does data I/O (it may load
  // metadata, e.g. open the part that holds `off`).
  virtual ByteSpan decode_span(uint64_t off) const {
    (void)off;
    return {};
  }
  // Whether reads of this array decode compressed chunks whose units decode_span reports (the
  // read path then asks the kernel for small windows and pushes decoded units instead).
  virtual bool decodes() const { return false; }
  // True when reading region `r` would decode nothing: every compressed chunk it touches is in
  // the decoded-chunk cache. Default (and for uncompressed data): false.
  virtual bool decoded(const Region& r) const {
    (void)r;
    return false;
  }

  // The file runs that hold bytes [off, off + len) of the array's C-order bytes verbatim, in
  // order, appended to `out`; false (with `out` as it was) when some of those bytes are not
  // stored so: compressed, fill values, chunks narrower than a row, a damaged or stale extent
  // (the ordinary read then gives the bytes or the error). Lets the FUSE adapter splice
  // uncompressed data from the source file's page cache into the reply, without a copy in the
  // daemon. The caller checks the source's identity only when the runs are made, so a file
  // rewritten in place between that and the reply is not seen (semantics.md).
  virtual bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const {
    (void)off;
    (void)len;
    (void)out;
    return false;
  }

  // The files this array reads its bytes from, appended to `out`, for a reader that holds them
  // open while it has the array open (hold_sources): what the array opens on first use
  // otherwise (a concatenation's parts, a VDS's sources) is opened now, at most `open_at_most`
  // files of it (those beyond could not be held: they are appended with an unknown identity).
  // Files read through libhdf5 are not listed (the HDF5 helper opens them by name). Default:
  // none (arrays in memory).
  virtual void source_files(std::vector<SourceFile>& out, size_t open_at_most) const {
    (void)out;
    (void)open_at_most;
  }

  // What of the array's storage cannot be read, found without reading its data (its chunk
  // index, where its chunks and bytes lie against the file's size, missing VDS sources): one
  // line saying why, or "" when everything can be read as far as that tells (a chunk may still
  // fail to decode). For `h5direct info` of a damaged file. Default: "" (nothing to check).
  virtual std::string damage() const { return {}; }

  uint64_t nbytes() const { return product(shape()) * dtype().itemsize; }
};

// The source files of an array held open (FdCache::hold) for as long as `held` lives: while
// its reader has it open, the array keeps reading files deleted or replaced meanwhile.
struct HeldSources {
  std::vector<std::shared_ptr<const void>> held;
  size_t files = 0;      // distinct source files
  size_t refused = 0;    // of those, left unheld by the descriptor bound (max_open_files)
};
HeldSources hold_sources(FdCache& fds, const Array& a);

// Appends a run to `out`, merged with the last one when it continues it in the same file.
void append_run(std::vector<FileRun>& out, const std::shared_ptr<const OpenFd>& fd, uint64_t file_off, uint64_t n);

using ArrayPtr = std::shared_ptr<const Array>;

// A part's decode unit seen through a composite: the composite's bytes [run_lo, run_hi) are a
// shifted copy of the part's bytes from part_lo on, and `off` lies in that run. Returns the
// part's decode_span around the matching part byte, moved into the composite's bytes and
// clipped to the run (empty when the part reports none).
ByteSpan shifted_span(const Array& part, uint64_t part_lo, uint64_t run_lo, uint64_t run_hi, uint64_t off);

// An array held in memory (train IDs, small tables).
class MemoryArray final : public Array {
 public:
  MemoryArray(Shape shape, DType dtype, std::vector<uint8_t> bytes, std::string what);
  const Shape& shape() const override { return shape_; }
  const DType& dtype() const override { return dtype_; }
  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override;
  std::string describe() const override { return what_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  Shape shape_;
  DType dtype_;
  std::vector<uint8_t> bytes_;
  std::string what_;
};

// Splits region `r` of a stack of row blocks along axis 0: block i holds output rows
// [offsets[i], offsets[i] + rows(i)), which are rows [first(i), first(i) + rows(i)) of its own
// array. Calls fn(i, sub, out_row) for every block `r` touches: `sub` is `r` in the block's own
// rows, `out_row` where it lands relative to r's first row.
template <class Rows, class First, class Fn>
void for_each_row_block(const std::vector<uint64_t>& offsets, Rows&& rows, First&& first, const Region& r, Fn&& fn) {
  const uint64_t r0 = r.start[0], r1 = r.start[0] + r.count[0];
  // First block whose output rows end after r0.
  auto it = std::upper_bound(offsets.begin(), offsets.end(), r0);
  size_t i = (it == offsets.begin()) ? 0 : size_t(it - offsets.begin()) - 1;
  for (; i < offsets.size() && offsets[i] < r1; ++i) {
    const uint64_t lo = std::max(r0, offsets[i]);
    const uint64_t hi = std::min(r1, offsets[i] + rows(i));
    if (hi <= lo) continue;
    Region sub = r;
    sub.start[0] = first(i) + (lo - offsets[i]);
    sub.count[0] = hi - lo;
    fn(i, sub, lo - r0);
  }
}

// Rows of several arrays with equal trailing shape and dtype, stacked on axis 0: an EuXFEL key
// across sequence files, and any other concatenation. Each part's array is obtained through its
// `open` on the first read (or decode_span) that touches it, so a read of a long run's key opens
// only the files it reads from; the part is then checked against the concatenation's shape and
// dtype (Error(EIO) naming it when it does not fit).
class ConcatArray final : public Array {
 public:
  struct Part {
    std::function<ArrayPtr()> open;  // throws h5d::Error when the part cannot be opened
    uint64_t begin = 0, rows = 0;    // rows [begin, begin + rows) of the part's array
    std::string what;                // names the part in errors
    std::string file, dataset;       // where the part's array is, when it is a dataset (for open_many)
  };
  // Called, when given, with the parts a read is about to open (two or more) before their
  // `open`s: lets the owner fetch what those need in one go (the run view: the parts' dataset
  // metadata in one HDF5 helper request per helper, H5File::prefetch_infos). A hint: what it
  // throws is ignored, and each `open` still does (or redoes) its own work.
  using OpenMany = std::function<void(const std::vector<const Part*>&)>;
  // `pool` (an engine's, Engine::pool()): a read's unopened parts are opened there, all at once
  // (their `open`s are independent, and wait on metadata and the source); without one, one after
  // the other.
  ConcatArray(std::vector<Part> parts, Shape trailing, DType dtype, std::string what, OpenMany open_many = {},
              ThreadPool* pool = nullptr);
  const Shape& shape() const override { return shape_; }
  const DType& dtype() const override { return dtype_; }
  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override;
  void plan_prefetch(const Region& r, ReadPlan& plan) const override;
  std::string describe() const override { return what_; }
  // A part's unit, clipped to the part's rows (the next part's bytes follow in the output, but
  // they come from another array).
  ByteSpan decode_span(uint64_t off) const override;
  bool decodes() const override;  // opens the first part
  bool decoded(const Region& r) const override;
  // The parts' runs, row block by row block (all parts' or none).
  bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const override;
  // Opens the parts (in row order, as many as their files stay within `open_at_most`; all at
  // once, as a read of them would) and lists theirs.
  void source_files(std::vector<SourceFile>& out, size_t open_at_most) const override;
  size_t part_count() const { return parts_.size(); }

 private:
  template <class Fn>
  void for_each_part(const Region& r, Fn&& fn) const;
  ArrayPtr part_array(size_t i) const;
  // Opens the parts `r` touches that are not open yet, on pool_ at once; what each
  // failed open threw, by part, for for_each_part to rethrow where the part is reached.
  std::map<size_t, std::exception_ptr> open_parts(const Region& r) const;
  std::map<size_t, std::exception_ptr> open_parts(std::vector<size_t> todo) const;
  std::vector<Part> parts_;
  OpenMany open_many_;
  ThreadPool* pool_ = nullptr;
  std::vector<uint64_t> offsets_;  // first output row of each part
  Shape trailing_, shape_;
  DType dtype_;
  std::string what_;
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards arrays_
  mutable std::vector<ArrayPtr> arrays_;
};

}  // namespace h5d
