// Side: daemon. The open HDF5 files (h5files.h).
#include "core/h5lib/h5files.h"

#include <sys/stat.h>

#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/metadata.h"
#include "core/log.h"

namespace h5d {

H5Files::H5Files(Engine& engine, HelperOptions helpers) : engine_(engine), helpers_(std::move(helpers)) {
  // Where libhdf5 runs, chosen once: helper processes, or this one where the program links the
  // helper-side library (metadata.h).
  if (!helpers_.path.empty()) {
    meta_ = make_remote_metadata(*this, helpers_);
  } else if (LocalMetadataFactory make = local_metadata_factory()) {
    meta_ = make(*this);
  } else {
    fail(EINVAL, "this program has no libhdf5 of its own: it needs the HDF5 helper (h5direct-helper)");
  }
}

H5Files::~H5Files() {
  std::map<std::string, std::shared_ptr<H5File>> files;  // destroyed after mu_ is released (lock order)
  std::lock_guard<std::mutex> lk(mu_);
  files.swap(files_);
}

std::shared_ptr<H5File> H5Files::open(const std::string& path) {
  struct stat st;
  const bool present = ::stat(path.c_str(), &st) == 0;
  std::shared_ptr<H5File> stale;  // destroyed after mu_ is released (lock order)
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = files_.find(path);
    if (it != files_.end()) {
      // A deleted file keeps its H5File: its reads fail with ESTALE.
      if (!present || it->second->identity() == identity_of(st)) return it->second;
      stale = std::move(it->second);
      files_.erase(it);
    }
  }
  if (stale) log::info(path + ": changed on disk; its metadata is read again");
  auto f = std::make_shared<H5File>(*this, path);
  std::lock_guard<std::mutex> lk(mu_);
  auto [it, inserted] = files_.emplace(path, f);
  return it->second;
}

void H5Files::forget(const std::string& path) {
  std::shared_ptr<H5File> gone;  // destroyed after mu_ is released (lock order)
  std::lock_guard<std::mutex> lk(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  gone = std::move(it->second);
  files_.erase(it);
}

std::shared_ptr<const DatasetInfo> H5Files::dataset_info(const std::string& file, const std::string& dset) {
  return open(file)->dataset_info(dset);
}

ArrayPtr H5Files::dataset_array(const std::string& file, const std::string& dset) {
  return open(file)->dataset_array(dset);
}

void H5Files::prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) {
  meta_->prefetch_infos(items);
}

std::vector<uint8_t> H5Files::library_read(const std::string& file, const std::string& dset,
                                           const std::vector<uint64_t>& start, const std::vector<uint64_t>& count) {
  return meta_->library_read(*open(file), dset, start, count);
}

}  // namespace h5d
