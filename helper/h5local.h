// LocalMetadata (metadata.h): libhdf5 in this process, under the HDF5 lock (h5lib.h). Part of
// the helper-side library (h5direct_h5, which links libhdf5): the helper process runs it for the
// daemon's requests (h5serve.cpp), and unit tests and tools run it directly. H5Files without
// helper options gets it from the factory this library registers.
#pragma once
#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "core/h5lib/metadata.h"

namespace h5d {

class LocalMetadata final : public Metadata {
 public:
  explicit LocalMetadata(H5Files& files);

  std::vector<LinkEntry> list_group(H5File& f, const std::string& group) override;
  ObjectKind kind_of(H5File& f, const std::string& path) override;
  std::vector<std::pair<std::string, Value>> attributes(H5File& f, const std::string& object) override;
  std::vector<std::string> attribute_names(H5File& f, const std::string& object) override;
  Value attribute(H5File& f, const std::string& object, const std::string& name) override;
  Value read_value(H5File& f, const std::string& dset, uint64_t max_elements) override;
  Value small_value(H5File& f, const std::string& dset, uint64_t max_elements) override {
    return read_value(f, dset, max_elements);
  }
  std::shared_ptr<const DatasetInfo> dataset_info(H5File& f, const std::string& dset, StorageInfo& st) override;
  bool dataset_details(H5File&, const std::string&, DatasetInfo&, StorageInfo&) override { return false; }
  bool datasets_details(H5File&, const std::string&, const std::vector<std::string>&,
                        std::vector<std::pair<DatasetInfo, StorageInfo>>&) override {
    return false;
  }
  std::vector<uint8_t> library_read(H5File& f, const std::string& dset, const std::vector<uint64_t>& start,
                                    const std::vector<uint64_t>& count) override;
  // libhdf5 runs under one lock: nothing to gain from fetching ahead or at once.
  void prefetch_infos(const std::vector<std::pair<std::string, std::string>>&) override {}
  void for_each_file(const std::vector<std::string>& files, const std::function<void(size_t)>& fn) override {
    for (size_t i = 0; i < files.size(); ++i) fn(i);
  }

  bool exists(H5File& f, const std::string& path) override;
  bool is_dataset(H5File& f, const std::string& path) override;
  bool is_group(H5File& f, const std::string& path) override;
  std::string soft_link_target(H5File& f, const std::string& path) override;
  bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) override;
  bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) override;
  std::vector<euxfel::meta::IndexArrays> read_index(H5File& f, const std::string& base,
                                                    const std::vector<std::string>& groups, uint64_t n) override;
  euxfel::meta::SequenceMeta read_sequence_file(H5File& f, bool with_metadata, bool with_index) override;
  std::vector<std::string> read_strings(H5File& f, const std::string& path) override;
  std::vector<std::string> list_datasets(H5File& f, const std::string& group) override;
  std::vector<std::string> list_members(H5File& f, const std::string& group) override;

  bool isolated() const override { return false; }

  // Test hook (the helper's H5DIRECT_HELPER_FAULT_FILE, h5serve.cpp): called with
  // "FILE@ATTRIBUTE" before each attribute is read in this process. Set once, before requests.
  static void set_attribute_hook(std::function<void(const std::string&)> hook);
};

// The libhdf5 handle of `f`'s file, opened on first use (H5File::local_state keeps it); only
// for code holding the HDF5 lock. It may be closed again (bounded open files) once the lock is
// released.
hid_t local_handle(H5File& f);

// H5Dread of region (start, count) of the dataspace of `dset_path` (folded array dims whole),
// in this process: the bytes in C order, in the dataset's dtype (converted by libhdf5 where
// DatasetInfo::convert_type). LocalMetadata::library_read (library_read.cpp).
std::vector<uint8_t> library_read_local(H5File& file, const std::string& dset_path,
                                        const std::vector<uint64_t>& start,
                                        const std::vector<uint64_t>& count);

}  // namespace h5d
