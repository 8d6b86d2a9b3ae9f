// What the parts of the run model (run_names.cpp, overview.cpp, sequence_file.cpp, run.cpp,
// run_index.cpp, run_values.cpp) share: file names of a run directory and small values.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "core/array/array.h"
#include "core/vocab/value.h"

namespace h5d::euxfel::detail {

// FileAccess.euxfel_filename_pattern: ([A-Z]+)-R\d{4}-(\w+)-S(\d{5}).h5
const std::regex& seq_name_re();
bool ends_with(const std::string& s, const std::string& suffix);
// .h5 files of a run directory as EXtra-data's RunDirectory lists them (overview.h5 excluded,
// case-insensitively), sorted by name. Our own extension: *-OVERVIEW.h5 is not a data file.
std::vector<std::string> h5_files_in(const std::string& dir, bool exclude_overviews);
// ~0 when the file cannot be stat()ed.
uint64_t file_size(const std::string& path);
std::string join(const std::string& dir, const std::string& name);

// A little-endian uint64 array held in memory (train IDs).
inline ArrayPtr u64_array(const std::vector<uint64_t>& v, const std::string& what) {
  DType t;
  t.typestr = "<u8";
  t.itemsize = 8;
  std::vector<uint8_t> bytes(v.size() * 8);
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian host
  return std::make_shared<MemoryArray>(Shape{v.size()}, t, std::move(bytes), what);
}

// The first element of a list value, or the value itself.
inline Value first_element(const Value& v) {
  if (v.kind == Value::Kind::List && !v.items.empty()) return v.items[0];
  return v;
}

}  // namespace h5d::euxfel::detail
