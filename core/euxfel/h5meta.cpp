// euxfel::meta (h5meta.h): each question asked of the engine's Metadata (core/h5lib/metadata.h:
// an HDF5 helper in the daemon, libhdf5 in process elsewhere, h5meta_local.cpp).
#include "core/euxfel/h5meta.h"

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"
#include "core/h5lib/metadata.h"

namespace h5d::euxfel::meta {
namespace {

Metadata& of(H5File& f) { return f.files().metadata(); }

}  // namespace

bool exists(H5File& f, const std::string& path) { return of(f).exists(f, path); }
bool is_dataset(H5File& f, const std::string& path) { return of(f).is_dataset(f, path); }
bool is_group(H5File& f, const std::string& path) { return of(f).is_group(f, path); }
std::string soft_link_target(H5File& f, const std::string& path) { return of(f).soft_link_target(f, path); }

bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) {
  return of(f).try_read_u64(f, path, out, n);
}

bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) {
  return of(f).try_read_i64(f, path, out, n);
}

std::vector<uint64_t> read_u64(H5File& f, const std::string& path, uint64_t n) {
  std::vector<uint64_t> out;
  if (!try_read_u64(f, path, out, n)) fail(ENOENT, f.path() + ":" + path + ": no such dataset");
  return out;
}

std::vector<int64_t> read_i64(H5File& f, const std::string& path, uint64_t n) {
  std::vector<int64_t> out;
  if (!try_read_i64(f, path, out, n)) fail(ENOENT, f.path() + ":" + path + ": no such dataset");
  return out;
}

std::vector<IndexArrays> read_index(H5File& f, const std::string& base, const std::vector<std::string>& groups,
                                    uint64_t n) {
  return of(f).read_index(f, base, groups, n);
}

SequenceMeta read_sequence_file(H5File& f, bool with_metadata, bool with_index) {
  return of(f).read_sequence_file(f, with_metadata, with_index);
}

std::vector<std::string> read_strings(H5File& f, const std::string& path) { return of(f).read_strings(f, path); }
std::vector<std::string> list_datasets(H5File& f, const std::string& group_path) {
  return of(f).list_datasets(f, group_path);
}
std::vector<std::string> list_members(H5File& f, const std::string& group_path) {
  return of(f).list_members(f, group_path);
}

}  // namespace h5d::euxfel::meta
