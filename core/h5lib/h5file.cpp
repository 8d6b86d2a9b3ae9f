#include "core/h5lib/h5file.h"

#include <sys/stat.h>

#include "core/array/dataset.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5files.h"
#include "core/h5lib/metadata.h"
#include "core/log.h"

namespace h5d {

H5File::H5File(H5Files& files, std::string path) : files_(files), path_(std::move(path)) {
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) identity_ = identity_of(st);
}

H5File::~H5File() = default;  // local_ closes the libhdf5 handle, if any (h5local.cpp)

Engine& H5File::engine() const { return files_.engine(); }

std::vector<LinkEntry> H5File::list_group(const std::string& group_path) {
  return files_.metadata().list_group(*this, group_path);
}

ObjectKind H5File::kind_of(const std::string& path) { return files_.metadata().kind_of(*this, path); }

std::vector<std::pair<std::string, Value>> H5File::attributes(const std::string& object_path) {
  return files_.metadata().attributes(*this, object_path);
}

std::vector<std::string> H5File::attribute_names(const std::string& object_path) {
  return files_.metadata().attribute_names(*this, object_path);
}

Value H5File::attribute(const std::string& object_path, const std::string& name) {
  return files_.metadata().attribute(*this, object_path, name);
}

Value H5File::read_value(const std::string& dset_path, uint64_t max_elements) {
  return files_.metadata().read_value(*this, dset_path, max_elements);
}

std::shared_ptr<const DatasetInfo> H5File::dataset_info(const std::string& dset_path) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = infos_.find(dset_path);
    if (it != infos_.end()) return it->second;
  }
  StorageInfo st;
  std::shared_ptr<const DatasetInfo> info = files_.metadata().dataset_info(*this, dset_path, st);
  return remember(dset_path, info, st);
}

bool H5File::info_cached(const std::string& dset_path) {
  std::lock_guard<std::mutex> lk(mu_);
  return infos_.count(dset_path) != 0;
}

bool H5File::answers_for(const DatasetInfo& info, const std::string& dset_path) const {
  return info.file != path_ || info.path == dset_path;
}

void H5File::remember_listed(const std::string& dset_path, const DatasetInfo& details, const StorageInfo& st) {
  auto listed = std::make_shared<DatasetInfo>(details);
  listed->attrs.clear();
  listed->small_value = Value{};
  remember(dset_path, std::move(listed), st);
}

std::shared_ptr<const DatasetInfo> H5File::remember(const std::string& dset_path,
                                                    std::shared_ptr<const DatasetInfo> info, const StorageInfo& st) {
  std::lock_guard<std::mutex> lk(mu_);
  auto [it, inserted] = infos_.emplace(dset_path, std::move(info));
  if (inserted) storage_.emplace(dset_path, st);
  return it->second;
}

std::shared_ptr<const DatasetInfo> H5File::dataset_details(const std::string& dset_path) {
  {  // one round trip where the metadata can (a helper); what listing needs is kept
    DatasetInfo info;
    StorageInfo st;
    if (files_.metadata().dataset_details(*this, dset_path, info, st)) {
      auto full = std::make_shared<const DatasetInfo>(std::move(info));
      remember_listed(dset_path, *full, st);
      return full;
    }
  }
  auto d = std::make_shared<DatasetInfo>(*dataset_info(dset_path));
  d->attrs = attributes(dset_path);
  for (VdsMapping& m : d->vds) {  // sources whose file is there but not the dataset
    if (m.resolved_file.empty()) continue;
    ObjectKind k = ObjectKind::Other;
    try {
      k = files_.open(m.resolved_file)->kind_of(m.dataset_name);
    } catch (const std::exception& e) {
      m.source_missing = e.what();
      continue;
    }
    if (k != ObjectKind::Dataset) m.source_missing = "no dataset " + m.dataset_name + " in " + m.resolved_file +
                                                     " (a dangling soft or external link?)";
  }
  if (!d->is_array) {
    try {
      // A value that breaks a helper is left out, not blamed on the file.
      d->small_value = files_.metadata().small_value(*this, dset_path, 1000);
    } catch (const std::exception&) {
    }
  }
  return d;
}

std::vector<std::shared_ptr<const DatasetInfo>> H5File::datasets_details(const std::string& group,
                                                                         const std::vector<std::string>& dset_paths) {
  std::vector<std::shared_ptr<const DatasetInfo>> out;
  out.reserve(dset_paths.size());
  std::vector<std::pair<DatasetInfo, StorageInfo>> got;
  if (dset_paths.size() == 1 || !files_.metadata().datasets_details(*this, group, dset_paths, got)) {
    for (const std::string& p : dset_paths) out.push_back(dataset_details(p));
    return out;
  }
  if (got.size() != dset_paths.size())
    fail(EIO, path_ + ":" + group + ": datasets_details from the HDF5 helper: " + std::to_string(got.size()) +
                  " answers for " + std::to_string(dset_paths.size()) + " datasets");
  for (size_t i = 0; i < got.size(); ++i) {
    auto& [info, st] = got[i];
    if (!answers_for(info, dset_paths[i]))
      fail(EIO, path_ + ":" + dset_paths[i] + ": datasets_details from the HDF5 helper answered for " + info.path);
    auto full = std::make_shared<const DatasetInfo>(std::move(info));
    remember_listed(dset_paths[i], *full, st);
    out.push_back(std::move(full));
  }
  return out;
}

StorageInfo H5File::storage_info(const std::string& dset_path) {
  dataset_info(dset_path);
  std::lock_guard<std::mutex> lk(mu_);
  return storage_.at(dset_path);
}

ArrayPtr H5File::dataset_array(const std::string& dset_path) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = arrays_.find(dset_path);
    if (it != arrays_.end()) return it->second;
  }
  auto info = dataset_info(dset_path);
  StorageInfo st = storage_info(dset_path);
  ArrayPtr a = make_dataset_array(files_.engine(), files_, info, st);
  std::lock_guard<std::mutex> lk(mu_);
  auto [it, inserted] = arrays_.emplace(dset_path, a);
  return it->second;
}

}  // namespace h5d
