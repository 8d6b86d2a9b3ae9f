// Arrays over one HDF5 dataset, by storage layout:
//   ContiguousArray  one byte range in the file: pread straight into the destination, large
//                    ranges split into parallel jobs;
//   ChunkedArray     chunk map read from the file itself (fmt/), each touched chunk read
//                    and decoded on the pool through the decoded-chunk cache;
//   VirtualArray     VDS mappings followed to their source datasets, read the same ways;
//   LibraryArray     H5Dread under the HDF5 lock, for what has no direct path (compact
//                    storage, external storage, filters without a decoder, unusual VDS).
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "core/array/array.h"
#include "core/array/storage_info.h"
#include "core/vocab/dataset_info.h"
#include "core/fmt/chunk_index.h"

namespace h5d {

class Engine;


ArrayPtr make_dataset_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);

// The layouts make_dataset_array hands off to: ContiguousArray (contiguous_array.cpp),
// ChunkedArray (chunked_array.cpp), VirtualArray (vds.cpp) and LibraryArray (library_array.cpp).
ArrayPtr make_contiguous_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);
ArrayPtr make_chunked_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);
ArrayPtr make_virtual_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st);
ArrayPtr make_library_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st,
                            const std::string& reason);

}  // namespace h5d
