// ContiguousArray: one byte range in the file, pread straight into the destination, large
// ranges split into parallel jobs.
#include "core/array/dataset.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/array/dataset_array.h"
#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/error.h"
#include "core/log.h"

// In h5d::detail, beside the base class and file runs it is built from (dataset_array.h).
namespace h5d::detail {
namespace {

// A contiguous dataset's bytes are the `stored` bytes at `addr` (the layout message's size,
// H5Dget_storage_size). A dataspace grown beyond them (a damaged or crafted shape) would read
// the file bytes that follow, which belong to something else (libhdf5 1.10.8 returns them):
// every read of such a dataset is EIO. Wholly, not only beyond the storage: the kernel reads
// whole pages and reads ahead, so which reads of the first part would succeed is not the
// reader's to know.
class ContiguousArray final : public DatasetArray {
 public:
  ContiguousArray(Engine& e, std::shared_ptr<const DatasetInfo> info, uint64_t addr, uint64_t stored,
                  const FileIdentity& id)
      : DatasetArray(e, std::move(info), id), addr_(addr), stored_(stored), file_id_(id) {}

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    if (addr_ == fmt::kUndefAddr) {  // storage never allocated: fill value
      auto fill = info_->fill_value;
      plan.add([r, dst, fill] { fill_region(r.count, fill, dst.base, dst.strides); });
      return;
    }
    if (nbytes() > stored_)
      fail_data(what_ + ": shape x itemsize (" + std::to_string(nbytes()) + " bytes) lies beyond its storage (" +
                std::to_string(stored_) + " bytes at file offset " + std::to_string(addr_) +
                "): the dataspace or the layout is damaged");
    std::vector<Run> runs;
    collect_runs(addr_, shape(), dtype().itemsize, r, dst, runs);
    try {
      for (const Run& run : runs) check_in_file(file_id_, info_->file, run.src, run.n, what_ + ": bytes");
    } catch (...) {
      rethrow_at(Place{info_->file, info_->path, ""});
    }
    if (log::debug_enabled()) log::debug("read " + what_ + ": direct (contiguous)");
    engine_.io().plan_runs(source_, runs, plan);
  }

  // C order is file order: bytes [off, off + len) are the file's bytes at addr + off.
  bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const override {
    if (addr_ == fmt::kUndefAddr || nbytes() > stored_ || off > nbytes() || len > nbytes() - off) return false;
    const uint64_t size = static_cast<uint64_t>(file_id_.size);
    if (file_id_.ino == 0 || addr_ > size || off + len > size - addr_) return false;  // the read says why
    append_run(out, engine_.io().storage().open(*source_), addr_ + off, len);
    return true;
  }

  std::string damage() const override {
    if (addr_ == fmt::kUndefAddr || nbytes() == 0) return {};
    if (nbytes() > stored_)
      return "shape x itemsize (" + std::to_string(nbytes()) + " bytes) lies beyond its storage (" +
             std::to_string(stored_) + " bytes)";
    try {
      check_in_file(file_id_, info_->file, addr_, nbytes(), "its bytes");
    } catch (const std::exception& e) {
      return e.what();
    }
    return {};
  }

  void source_files(std::vector<SourceFile>& out, size_t) const override {
    if (addr_ != fmt::kUndefAddr) out.push_back({info_->file, file_id_});
  }

  void plan_prefetch(const Region& r, ReadPlan& plan) const override {
    if (r.empty() || addr_ == fmt::kUndefAddr) return;
    if (nbytes() > stored_) return;
    engine_.io().plan_readahead(source_, {file_span(addr_, shape(), dtype().itemsize, r)}, plan);
  }

 private:
  uint64_t addr_;
  uint64_t stored_;
  FileIdentity file_id_;
};

}  // namespace
}  // namespace h5d::detail

namespace h5d {

ArrayPtr make_contiguous_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st) {
  return std::make_shared<detail::ContiguousArray>(engine, std::move(info), st.contiguous_addr, st.storage_size, st.file_id);
}

}  // namespace h5d
