// What the layouts of one dataset (contiguous_array.cpp, chunked_array.cpp) share: the base
// class of their arrays, and file byte runs (cutting a region into runs contiguous in the file
// and in the destination; source I/O reads them, core/engine/source_io.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/array/array.h"
#include "core/array/storage_info.h"
#include "core/engine/source_io.h"
#include "core/vocab/dataset_info.h"

namespace h5d {
class Engine;
}

namespace h5d::detail {

// Shared-owned (make_shared), so that decode-ahead tasks, which nobody waits for, keep the
// array they read alive (weak_from_this().lock()).
class DatasetArray : public Array, public std::enable_shared_from_this<DatasetArray> {
 public:
  DatasetArray(Engine& engine, std::shared_ptr<const DatasetInfo> info, const FileIdentity& id = {})
      : engine_(engine),
        info_(std::move(info)),
        what_(info_->file + ":" + info_->path),
        source_(make_source(info_->file, id, what_)) {}
  const Shape& shape() const override { return info_->shape; }
  const DType& dtype() const override { return info_->dtype; }
  std::string describe() const override { return what_; }

 protected:
  Engine& engine_;
  std::shared_ptr<const DatasetInfo> info_;
  std::string what_;
  SourcePtr source_;  // the file, as source I/O reads it
};

// One contiguous byte run: `n` bytes at file offset `src` go to `dst` (what source I/O reads).
using Run = ByteRun;

// Bytes [addr, addr + n) of a file whose size was `id.size` when its metadata was read must lie
// inside it. A truncated file (the helper opens those, h5truncated.cpp) has intact metadata
// pointing past its cut: what lies there is EIO, named, and everything before it is served.
// `path`: the file (its superblock says how long it should be, for the message).
void check_in_file(const FileIdentity& id, const std::string& path, uint64_t addr, uint64_t n,
                   const std::string& what);

// Cuts region `r` of a C-order block of `shape` stored at file offset `addr` into runs that are
// contiguous both in the file and in `dst`.
void collect_runs(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r, const DestView& dst,
                  std::vector<Run>& runs);

// The file bytes from the first to the last element of region `r` of a C-order block of `shape`
// stored at `addr` (a read-ahead hint: for regions of whole rows exactly their bytes).
Run file_span(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r);

}  // namespace h5d::detail
