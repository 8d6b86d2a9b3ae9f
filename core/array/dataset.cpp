#include "core/array/dataset.h"

#include "core/array/dataset_array.h"
#include "core/error.h"

namespace h5d {

namespace {

// A dataset whose layout contradicts its shape (StorageInfo::damaged): listed like any other,
// every read EIO saying why.
class DamagedArray final : public detail::DatasetArray {
 public:
  DamagedArray(Engine& e, std::shared_ptr<const DatasetInfo> info, std::string why)
      : DatasetArray(e, std::move(info)), why_(std::move(why)) {}
  void plan(const Region& r, const DestView&, ReadPlan&) const override {
    if (!r.empty()) fail_data(what_ + ": " + why_);
  }

 private:
  std::string why_;
};

}  // namespace

// Follows the one direct-or-library decision, made when the metadata was read
// (decide_read_path in h5file.cpp: conversions, compact and external storage, unsupported
// filters, other layouts all set st.library_only).
ArrayPtr make_dataset_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st) {
  if (!info->is_array) fail(EINVAL, info->file + ":" + info->path + ": not an array: " + info->why_not_array);
  if (!st.damaged.empty()) return std::make_shared<DamagedArray>(engine, info, st.damaged);
  if (st.library_only) return make_library_array(engine, sources, info, st, st.library_reason);
  if (info->layout == "contiguous") return make_contiguous_array(engine, info, st);
  if (info->layout == "chunked") return make_chunked_array(engine, info, st);
  if (info->layout == "virtual") return make_virtual_array(engine, sources, info, st);
  fail(EIO, info->file + ":" + info->path + ": " + info->layout + " layout without a library read path");
}

}  // namespace h5d
