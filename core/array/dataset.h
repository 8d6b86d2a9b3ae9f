// Arrays over one HDF5 dataset, by storage layout:
//   ContiguousArray  one byte range in the file: pread straight into the destination, large
//                    ranges split into parallel jobs;
//   ChunkedArray     chunk map read from the file itself (fmt/), each touched chunk read
//                    and decoded on the pool through the decoded-chunk cache;
//   VirtualArray     VDS mappings followed to their source datasets, read the same ways;
//   LibraryArray     H5Dread under the HDF5 lock, for what has no direct path (compact
//                    storage, external storage, filters without a decoder, unusual VDS).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/array/array.h"
#include "core/array/storage_info.h"
#include "core/vocab/dataset_info.h"
#include "core/fmt/chunk_index.h"

namespace h5d {

class Engine;

// What a dataset's array asks of the file layer above it (h5lib: H5Files), given when the array
// is made: the metadata and arrays of other files' datasets (a VDS's sources), that metadata in
// one batch ahead, and libhdf5's own read of a dataset (LibraryArray: in a helper process in the
// daemon). It outlives the arrays it makes.
class DatasetSources {
 public:
  virtual ~DatasetSources() = default;
  virtual std::shared_ptr<const DatasetInfo> dataset_info(const std::string& file, const std::string& dset) = 0;
  virtual ArrayPtr dataset_array(const std::string& file, const std::string& dset) = 0;
  // A hint: (file, dataset) pairs whose dataset_info follows (H5Files::prefetch_infos).
  virtual void prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) = 0;
  // H5Dread of elements [start, start + count) of the dataset's dataspace: their bytes.
  virtual std::vector<uint8_t> library_read(const std::string& file, const std::string& dset,
                                            const std::vector<uint64_t>& start,
                                            const std::vector<uint64_t>& count) = 0;
};

ArrayPtr make_dataset_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st);

// The layouts make_dataset_array hands off to: ContiguousArray (contiguous_array.cpp),
// ChunkedArray (chunked_array.cpp), VirtualArray (vds.cpp) and LibraryArray (library_array.cpp).
ArrayPtr make_contiguous_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);
ArrayPtr make_chunked_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);
ArrayPtr make_virtual_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st);
ArrayPtr make_library_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st, const std::string& reason);

}  // namespace h5d
