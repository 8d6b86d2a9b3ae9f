// euxfel::meta's questions (h5meta.h) answered by libhdf5 in this process, under the HDF5 lock:
// LocalMetadata's (helper/h5local.h) euxfel part, in the helper-side library. Callers ask
// euxfel::meta, which asks the engine's Metadata.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/euxfel/h5meta.h"

namespace h5d::euxfel::meta::local {

bool exists(H5File& f, const std::string& path);
bool is_dataset(H5File& f, const std::string& path);
bool is_group(H5File& f, const std::string& path);
std::string soft_link_target(H5File& f, const std::string& path);
bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n);
bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n);
std::vector<IndexArrays> read_index(H5File& f, const std::string& base, const std::vector<std::string>& groups,
                                    uint64_t n);
std::vector<std::string> read_strings(H5File& f, const std::string& path);
std::vector<std::string> list_datasets(H5File& f, const std::string& group_path);
std::vector<std::string> list_members(H5File& f, const std::string& group_path);

}  // namespace h5d::euxfel::meta::local
