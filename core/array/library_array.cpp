// LibraryArray: reads through H5Dread (DatasetSources::library_read: in a helper process in the
// daemon, the bytes coming back over the boundary; helper/library_read.cpp in process). Correct for everything the library
// reads, but serialised: used only where no direct path exists, and every use is counted with
// its reason in the stats and (with -o debug) logged.
#include <algorithm>
#include <cstring>

#include "core/array/dataset.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/log.h"

namespace h5d {
namespace {

// No decode_span: every read is one H5Dread of exactly the region asked for, under the HDF5
// lock, and nothing it decodes is kept, so no bytes are cheaper once a read touched them.
class LibraryArray final : public Array {
 public:
  LibraryArray(Engine& e, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info, size_t ds_rank,
               std::string reason)
      : engine_(e), sources_(sources), info_(std::move(info)), ds_rank_(ds_rank), reason_(std::move(reason)),
        what_(info_->file + ":" + info_->path) {}
  const Shape& shape() const override { return info_->shape; }
  const DType& dtype() const override { return info_->dtype; }
  std::string describe() const override { return what_; }

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    plan.add([this, r, dst] { read(r, dst); });
  }

 private:
  void read(const Region& r, const DestView& dst) const {
    engine_.stats().library_reads.fetch_add(1, std::memory_order_relaxed);
    engine_.stats().note_fallback(reason_);
    if (log::debug_enabled()) log::debug("read " + what_ + ": library (" + reason_ + ")");
    // Read whole HDF5 elements: the region over the dataspace, with the folded array dims full.
    Shape buf_shape(r.count.data(), r.count.data() + ds_rank_);
    for (size_t k = ds_rank_; k < info_->shape.size(); ++k) buf_shape.push_back(info_->shape[k]);
    const size_t E = info_->dtype.itemsize;
    const std::vector<uint64_t> start(r.start.data(), r.start.data() + ds_rank_);
    const std::vector<uint64_t> count(r.count.data(), r.count.data() + ds_rank_);
    std::vector<uint8_t> buf;
    try {
      buf = sources_.library_read(info_->file, info_->path, start, count);
      if (buf.size() != product(buf_shape) * E)
        fail(EIO, "library read returned " + std::to_string(buf.size()) + " bytes, expected " +
                      std::to_string(product(buf_shape) * E));
    } catch (...) {
      rethrow_with_context(what_ + " (library read: " + reason_ + ")");
    }
    Shape off(r.start.size(), 0);
    for (size_t k = ds_rank_; k < r.start.size(); ++k) off[k] = r.start[k];
    auto bst = c_strides(buf_shape, E);
    const uint8_t* src = buf.data();
    for (size_t k = 0; k < off.size(); ++k) src += off[k] * static_cast<uint64_t>(bst[k]);
    copy_region(r.count, E, src, bst, dst.base, dst.strides);
  }

  Engine& engine_;
  DatasetSources& sources_;
  std::shared_ptr<const DatasetInfo> info_;
  size_t ds_rank_;
  std::string reason_;
  std::string what_;
};

}  // namespace

ArrayPtr make_library_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st, const std::string& reason) {
  return std::make_shared<LibraryArray>(engine, sources, std::move(info), st.ds_rank, reason);
}

}  // namespace h5d
