// What a dataset is, as every layer above the file format sees it: its shape, element type,
// layout, filters, fill value, attributes and VDS mappings (H5File reads it, a helper sends it,
// arrays, vfs and the run view use it). Part of the core's vocabulary (core/vocab/: standard
// library only).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/vocab/dtype.h"
#include "core/vocab/filter_info.h"
#include "core/vocab/shape.h"
#include "core/vocab/value.h"

namespace h5d {

// A regular hyperslab selection (or "all" when is_all). count/block may be ~0 (unlimited).
struct Hyperslab {
  bool is_all = false;
  Shape start, stride, count, block;
};

struct VdsMapping {
  std::string file_name;      // as stored ("." = the VDS's own file)
  std::string dataset_name;   // as stored
  std::string resolved_file;  // absolute path found by HDF5's rules, "" if not found
  Hyperslab vspace, srcspace;
  Shape src_shape;            // source dataset extent when it could be opened
  // The file is found but the dataset is not there (a dangling soft or external link on its
  // path, say): why. Only from H5File::dataset_details.
  std::string source_missing;
};

struct DatasetInfo {
  std::string file;  // absolute path of the HDF5 file
  std::string path;  // dataset path inside the file
  Shape shape, maxshape;  // maxshape entries ~0 = unlimited
  DType dtype;       // element type after folding array types into the shape
  bool is_array = true;      // false: variable-length data, references, ... (see why_not_array)
  std::string why_not_array;
  std::string hdf5_type;     // short description of the HDF5 type ("vlen string", "H5T_STD_U16LE")
  std::string layout;        // "contiguous", "chunked", "compact", "virtual"
  Shape chunks;              // chunked only
  std::string chunk_index;   // "btree-v1", "fixed-array", ... (chunked only)
  std::vector<FilterInfo> filters;
  std::vector<uint8_t> fill_value;  // one element's bytes (zeros when undefined)
  bool fill_value_defined = false;
  std::vector<std::pair<std::string, Value>> attrs;  // only from H5File::dataset_details
  std::vector<VdsMapping> vds;
  std::string read_path;     // "direct" or "library: <reason>"
  bool convert_type = false; // stored bytes differ from dtype's standard layout (h5::needs_conversion):
                             // read through libhdf5 into h5::standard_type
  Value small_value;         // for non-arrays: the value itself when it is small (strings);
                             // only from H5File::dataset_details
};

}  // namespace h5d
