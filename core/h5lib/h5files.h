// Side: daemon. The open HDF5 files of a process, and where their questions for libhdf5 go: the
// one Metadata implementation (metadata.h), chosen once when this is made, as the write path's
// WriteFile is (core/write/): with helper options the HDF5 helper processes (RemoteMetadata),
// else libhdf5 in this process (LocalMetadata, where the program links the helper side).
//
// It is also what a dataset's array asks of the file layer (array/dataset.h, DatasetSources):
// the arrays of other files' datasets (a VDS's sources), their metadata in one batch, and
// libhdf5's own read of a dataset (LibraryArray).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/array/dataset.h"
#include "core/h5lib/h5helper.h"

namespace h5d {

class Engine;
class H5File;
class Metadata;

class H5Files final : public DatasetSources {
 public:
  // `helpers.path` empty: libhdf5 in this process (Error(EINVAL) in a program without it).
  H5Files(Engine& engine, HelperOptions helpers);
  ~H5Files() override;
  H5Files(const H5Files&) = delete;
  H5Files& operator=(const H5Files&) = delete;

  Engine& engine() const { return engine_; }
  Metadata& metadata() { return *meta_; }
  // The helper options the files were opened with (the write path spawns its writer processes
  // with them; empty path: libhdf5 in this process).
  const HelperOptions& helper_options() const { return helpers_; }

  // Opens an HDF5 file (or returns the one already open). A file that changed on disk since
  // (one stat) gets a new H5File: metadata, chunk maps and decoded chunks are read anew, and
  // arrays of the old one fail with ESTALE. Throws Error(ENOENT/EIO/...).
  std::shared_ptr<H5File> open(const std::string& path);
  // Drops what is known of `path` (its H5File: metadata, arrays, libhdf5 handle once unused);
  // the next open reads it anew.
  void forget(const std::string& path);

  // DatasetSources (array/dataset.h).
  std::shared_ptr<const DatasetInfo> dataset_info(const std::string& file, const std::string& dset) override;
  ArrayPtr dataset_array(const std::string& file, const std::string& dset) override;
  void prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) override;
  std::vector<uint8_t> library_read(const std::string& file, const std::string& dset,
                                    const std::vector<uint64_t>& start, const std::vector<uint64_t>& count) override;

 private:
  Engine& engine_;
  HelperOptions helpers_;
  std::unique_ptr<Metadata> meta_;
  std::mutex mu_;  // lock level 4 (docs/architecture.md): after the HDF5 lock; guards files_
  std::map<std::string, std::shared_ptr<H5File>> files_;
};

}  // namespace h5d
