// The one abstraction every view is built from: an N-d array whose regions can be planned into
// independent tasks (pread + decode + copy), so that a read spanning many chunks, files or
// modules runs them all at once on the pool. Datasets (contiguous, chunked, compact, virtual),
// EuXFEL key arrays (concatenations of row blocks) and in-memory arrays all implement it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/region.h"

namespace h5d {

// The tasks of one read. Each task is independent and may run on any thread; all of them
// together write the requested region. A task reports failure by throwing h5d::Error.
struct ReadPlan {
  std::vector<std::function<void()>> tasks;
  void add(std::function<void()> task) { tasks.push_back(std::move(task)); }
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
  // Rows along axis 0 that are fetched together: reading any byte of the band of rows
  // [k * fetch_rows, (k + 1) * fetch_rows) decodes all of it (compressed chunks), so the rest of
  // the band is cheap to serve afterwards. 0: no such unit.
  virtual uint64_t fetch_rows() const { return 0; }
  // True when reading region `r` would decode nothing: every compressed chunk it touches is in
  // the decoded-chunk cache. Default (and for uncompressed data): false.
  virtual bool decoded(const Region& r) const {
    (void)r;
    return false;
  }

  uint64_t nbytes() const { return product(shape()) * dtype().itemsize; }
};

using ArrayPtr = std::shared_ptr<const Array>;

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

// Rows [begin, end) of several arrays with equal trailing shape and dtype, stacked on axis 0
// (an EuXFEL key across sequence files).
class ConcatArray final : public Array {
 public:
  struct Part {
    ArrayPtr array;
    uint64_t begin = 0, end = 0;  // rows of `array`
  };
  ConcatArray(std::vector<Part> parts, Shape trailing, DType dtype, std::string what);
  const Shape& shape() const override { return shape_; }
  const DType& dtype() const override { return dtype_; }
  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override;
  void plan_prefetch(const Region& r, ReadPlan& plan) const override;
  std::string describe() const override { return what_; }
  uint64_t fetch_rows() const override;
  bool decoded(const Region& r) const override;
  const std::vector<Part>& parts() const { return parts_; }

 private:
  template <class Fn>
  void for_each_part(const Region& r, Fn&& fn) const;
  std::vector<Part> parts_;
  std::vector<uint64_t> offsets_;  // first output row of each part
  Shape shape_;
  DType dtype_;
  std::string what_;
};

}  // namespace h5d
