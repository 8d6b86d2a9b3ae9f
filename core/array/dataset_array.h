// What the layouts of one dataset (contiguous_array.cpp, chunked_array.cpp) share: the base
// class of their arrays, and file byte runs (cutting a region into runs contiguous in the file
// and in the destination, reading them on the pool, read-ahead hints for them).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/array/array.h"
#include "core/array/storage_info.h"
#include "core/vocab/dataset_info.h"

namespace h5d {
class Engine;
}

namespace h5d::detail {

// Shared-owned (make_shared), so that decode-ahead tasks, which nobody waits for, keep the
// array they read alive (weak_from_this().lock()).
class DatasetArray : public Array, public std::enable_shared_from_this<DatasetArray> {
 public:
  DatasetArray(Engine& engine, std::shared_ptr<const DatasetInfo> info)
      : engine_(engine), info_(std::move(info)), what_(info_->file + ":" + info_->path) {}
  const Shape& shape() const override { return info_->shape; }
  const DType& dtype() const override { return info_->dtype; }
  std::string describe() const override { return what_; }

 protected:
  Engine& engine_;
  std::shared_ptr<const DatasetInfo> info_;
  std::string what_;
};

// One contiguous byte run: `n` bytes at file offset `src` go to `dst`.
struct Run {
  uint64_t src;
  uint8_t* dst;
  uint64_t n;
};

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

// Turns runs into pool tasks, one source request each: a run longer than the plan's request
// size (ReadPlan::request) is cut into pieces read in parallel; runs shorter than
// Engine::kMinRequest share a task (a few small requests in a row).
// `id` is the file the runs were computed from: a file changed since fails with ESTALE, checked
// before and after the preads.
void plan_runs(Engine& engine, const std::string& path, const FileIdentity& id, const std::string& what,
               std::vector<Run>& runs, ReadPlan& plan);

// The decode-ahead of bytes stored as they are read (contiguous data, unfiltered chunks): read the
// file ranges of `runs` into the source's page cache now, in requests of the plan's request size
// (at most Engine::kMaxScratchRequest) on the pool, so that a stream over cold data finds them
// there (and its spliced replies do not wait for the source). A piece the page cache holds
// already costs no request (source_resident). Neighbouring runs are merged.
void plan_readahead(Engine& engine, const std::string& path, const FileIdentity& id, const std::string& what,
                    std::vector<Run>& runs, ReadPlan& plan);

// The file bytes from the first to the last element of region `r` of a C-order block of `shape`
// stored at `addr` (a read-ahead hint: for regions of whole rows exactly their bytes).
Run file_span(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r);

}  // namespace h5d::detail
