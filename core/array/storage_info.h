// How a dataset's bytes are stored, beyond the public DatasetInfo: what the direct readers
// (contiguous_array, chunked_array, dataset.cpp) need, filled in by H5File (h5lib/h5file.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/engine/fd_cache.h"
#include "core/fmt/chunk_index.h"

namespace h5d {

// What H5File learns about a dataset's storage, beyond the public DatasetInfo.
struct StorageInfo {
  size_t ds_rank = 0;      // rank of the HDF5 dataspace (array element types add trailing dims)
  uint64_t ohdr_addr = 0;  // object header address (relative)
  fmt::FileGeometry geo;
  uint64_t contiguous_addr = fmt::kUndefAddr;  // absolute (H5Dget_offset already adds the user block)
  uint64_t storage_size = 0;
  bool external = false;       // external raw storage (H5Pget_external_count > 0)
  bool library_only = false;   // must read through libhdf5
  std::string library_reason;
  std::string damaged;         // not empty: why every read of the dataset is EIO (a damaged layout)
  FileIdentity file_id;        // the file this was read from; data reads check it (ESTALE)
};

}  // namespace h5d
