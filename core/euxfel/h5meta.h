// Small metadata reads for the EuXFEL run model, asked of the engine's Metadata
// (core/h5lib/metadata.h; libhdf5 under the HDF5 lock in h5meta_local.cpp): whole INDEX arrays with one H5Dread each (converted to 64-bit integers by the library), string
// lists from METADATA, the datasets under a group in one H5Ovisit, and link kinds. Never used
// for bulk data: key arrays read through H5File::dataset_array (the direct path).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/h5lib/run_meta.h"
#include "core/vocab/value.h"

namespace h5d {
class H5File;
}

namespace h5d::euxfel::meta {

// True when `path` names an existing object (links followed; dangling links are false).
bool exists(H5File& f, const std::string& path);
// True when `path` is a dataset / a group.
bool is_dataset(H5File& f, const std::string& path);
bool is_group(H5File& f, const std::string& path);

// Soft link target of `path` ("" when it is not a soft link or does not exist).
std::string soft_link_target(H5File& f, const std::string& path);

// Elements [0, min(n, extent)) of a 1-d (or first column of an n-d) integer dataset, converted
// by libhdf5 to uint64 / int64. n = ~0: the whole extent. Throws Error(ENOENT) when missing.
std::vector<uint64_t> read_u64(H5File& f, const std::string& path, uint64_t n = ~0ull);
std::vector<int64_t> read_i64(H5File& f, const std::string& path, uint64_t n = ~0ull);

// As read_u64 / read_i64, but false (out untouched) when there is no such dataset: one libhdf5
// call where an existence check and a read would take several.
bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out,
                  uint64_t n = ~0ull);
bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out,
                  uint64_t n = ~0ull);

// The EuXFEL INDEX arrays of several index groups below one INDEX group (`base`, e.g.
// "/INDEX/<source>"; group "" = base itself), `base` opened once: <group>/first and
// <group>/count, or format 0.1's first/last/status converted to count = (last-first+1)*status,
// each cut to n entries (IndexArrays: core/h5lib/run_meta.h).
std::vector<IndexArrays> read_index(H5File& f, const std::string& base,
                                    const std::vector<std::string>& groups, uint64_t n);

// Everything Run::open reads from one sequence file (SequenceMeta: core/h5lib/run_meta.h).
// Throws Error (the file is then skipped, as EXtra-data skips it) when it is no sequence file.
// with_index: also the INDEX arrays of every (source, group) METADATA names (else `index` is
// empty: Run reads a source's INDEX when the source is first used).
SequenceMeta read_sequence_file(H5File& f, bool with_metadata, bool with_index = false);
namespace detail {
// read_sequence_file made of the other questions here, one call each: where libhdf5 runs (the
// local Metadata), which the remote one asks for the whole in one request.
SequenceMeta read_sequence_file_parts(H5File& f, bool with_metadata, bool with_index);
}  // namespace detail

// A 1-d string dataset (variable or fixed length) as strings; empty strings kept.
std::vector<std::string> read_strings(H5File& f, const std::string& path);

// Paths (relative to group_path, '/'-separated) of every dataset below group_path, sorted.
// Soft links are followed for group_path itself; inside it, objects are visited once each.
std::vector<std::string> list_datasets(H5File& f, const std::string& group_path);

// Names of the direct members of a group (any kind), sorted; empty when it is not a group.
std::vector<std::string> list_members(H5File& f, const std::string& group_path);

}  // namespace h5d::euxfel::meta
