#include "core/h5lib/h5lib.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"

namespace h5d::h5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex mu;  // lock level 3 (docs/architecture.md): after levels 1-2, before 4-6
  // A thread-safe libhdf5 keeps the error-printing setting per thread: silence it on every
  // thread that calls the library (errors reach the log once, through h5d::Error).
  thread_local bool quiet = false;
  if (!quiet) {
    quiet = true;
    std::lock_guard<std::recursive_mutex> lk(mu);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  return mu;
}

void release_free_lists() {
  auto lk = lock();
  H5garbage_collect();
}

Handle transfer_for(hid_t file_type, hid_t mem_type, uint64_t elements) {
  auto lk = lock();
  // libhdf5's default (H5D_TEMP_BUF_SIZE); and a floor well above any element a metadata read
  // converts: libhdf5 refuses a buffer smaller than the largest form an element takes during its
  // conversion ("temporary buffer max size is too small"), which for strings and compounds is
  // larger than either type's H5Tget_size.
  constexpr uint64_t kDefault = 1u << 20, kFloor = 64u << 10;
  const uint64_t elem = std::max<uint64_t>({H5Tget_size(file_type), H5Tget_size(mem_type), 1});
  Handle p = check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate(dataset transfer)");
  if (elem > kFloor / 16) return p;  // wide elements: libhdf5's own sizing
  const uint64_t need = elements > kDefault / elem ? kDefault : std::max<uint64_t>(elements, 1) * elem;
  check(H5Pset_buffer(p.get(), static_cast<size_t>(std::max(need, kFloor)), nullptr, nullptr), "H5Pset_buffer");
  return p;
}

void init_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    // No HDF5 file locks: a reader must never keep a writer from opening a file it serves
    // (runs are written while people read them); changes are detected by file identity
    // (fd_cache.h). Process-wide, so that every open of a file in this process agrees (libhdf5
    // refuses a second open with different locking). A value set by the user wins.
    ::setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
    Lock lk = lock();
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

std::string error_stack() {
  std::string out;
  auto walk = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    auto* s = static_cast<std::string*>(data);
    if (n > 3) return 0;
    if (!s->empty()) s->append("; ");
    s->append(e->desc ? e->desc : "?");
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &out);
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? "HDF5 call failed" : out;
}

void fail_h5(int code, const std::string& what) { throw Error(code, what + ": " + error_stack()); }

void Handle::reset() {
  if (id_ < 0) return;
  Lock lk = lock();
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: H5Idec_ref(id_); break;
  }
  id_ = -1;
}

Handle check(hid_t id, const std::string& what, int code) {
  if (id < 0) fail_h5(code, what);
  return Handle(id);
}

void check(herr_t rc, const std::string& what, int code) {
  if (rc < 0) fail_h5(code, what);
}

namespace {
// A failure that is an answer: nothing to report, nothing left on the stack.
void clear() { H5Eclear2(H5E_DEFAULT); }
// An id, or an empty Handle (the stack cleared) when the call failed.
Handle or_absent(hid_t id) {
  Handle h(id);
  if (!h) clear();
  return h;
}
}  // namespace

Handle open_dataset(hid_t loc, const std::string& path, const std::string& what, int code) {
  return check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), what, code);
}

Handle try_open_dataset(hid_t loc, const std::string& path) { return or_absent(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)); }

Handle open_group(hid_t loc, const std::string& path, const std::string& what, int code) {
  return check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), what, code);
}

Handle try_open_group(hid_t loc, const std::string& path) { return or_absent(H5Gopen2(loc, path.c_str(), H5P_DEFAULT)); }

Handle try_open_object(hid_t loc, const std::string& path) { return or_absent(H5Oopen(loc, path.c_str(), H5P_DEFAULT)); }

Handle dataset_type(hid_t dset, const std::string& what) { return check(H5Dget_type(dset), what + ": H5Dget_type"); }

Handle dataset_space(hid_t dset, const std::string& what) {
  return check(H5Dget_space(dset), what + ": H5Dget_space");
}

Handle dataset_create_plist(hid_t dset, const std::string& what) {
  return check(H5Dget_create_plist(dset), what + ": H5Dget_create_plist");
}

std::optional<H5O_info_t> try_object_info(hid_t loc, const std::string& path, unsigned fields) {
  H5O_info_t info;
  if (H5Oget_info_by_name2(loc, path.c_str(), &info, fields, H5P_DEFAULT) < 0) {
    clear();
    return std::nullopt;
  }
  return info;
}

std::optional<H5O_info_t> try_object_info(hid_t obj, unsigned fields) {
  H5O_info_t info;
  if (H5Oget_info2(obj, &info, fields) < 0) {
    clear();
    return std::nullopt;
  }
  return info;
}

std::optional<H5L_info_t> try_link_info(hid_t loc, const std::string& path) {
  H5L_info_t info;
  if (H5Lget_info(loc, path.c_str(), &info, H5P_DEFAULT) < 0) {
    clear();
    return std::nullopt;
  }
  return info;
}

std::optional<std::vector<char>> try_link_value(hid_t loc, const std::string& path, size_t size) {
  std::vector<char> buf(size + 1, 0);
  if (H5Lget_val(loc, path.c_str(), buf.data(), buf.size(), H5P_DEFAULT) < 0) {
    clear();
    return std::nullopt;
  }
  return buf;
}

bool try_link_exists(hid_t loc, const std::string& path) {
  const htri_t r = H5Lexists(loc, path.c_str(), H5P_DEFAULT);
  if (r < 0) clear();
  return r > 0;
}

bool try_object_exists(hid_t loc, const std::string& path) {
  const htri_t r = H5Oexists_by_name(loc, path.c_str(), H5P_DEFAULT);
  if (r < 0) clear();
  return r > 0;
}

int extent_ndims(hid_t space, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail_h5(EIO, what + ": H5Sget_simple_extent_ndims");
  return rank;
}

std::vector<hsize_t> extent_dims(hid_t space, const std::string& what, std::vector<hsize_t>* maxdims) {
  std::vector<hsize_t> dims(static_cast<size_t>(extent_ndims(space, what)));
  if (maxdims) maxdims->assign(dims.size(), 0);
  if (!dims.empty())
    check(H5Sget_simple_extent_dims(space, dims.data(), maxdims ? maxdims->data() : nullptr),
          what + ": H5Sget_simple_extent_dims");
  return dims;
}

hssize_t extent_npoints(hid_t space, const std::string& what) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) fail_h5(EIO, what + ": H5Sget_simple_extent_npoints");
  return n;
}

size_t type_size(hid_t type, const std::string& what) {
  const size_t n = H5Tget_size(type);
  if (n == 0) fail_h5(EIO, what + ": H5Tget_size");
  return n;
}

void read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer, void* buf,
          const std::string& what) {
  check(H5Dread(dset, mem_type, mem_space, file_space, xfer, buf), what);
}

void vlen_reclaim(hid_t type, hid_t space, void* buf, const std::string& what) {
  if (H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf) < 0)
    log::warn(what + ": H5Dvlen_reclaim failed (its buffers are left behind): " + error_stack());
}

Handle try_open_attribute(hid_t obj, const std::string& name, std::string& why) {
  Handle a(H5Aopen_by_name(obj, ".", name.c_str(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a) why = error_stack();  // clears the stack
  return a;
}

bool try_attribute_names(hid_t obj, std::vector<std::string>& names, std::string& why) {
  auto cb = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names) < 0) {
    why = error_stack();
    return false;
  }
  return true;
}

std::vector<std::pair<std::string, H5L_type_t>> links(hid_t group, const std::string& what) {
  std::vector<std::pair<std::string, H5L_type_t>> out;
  auto cb = [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
    static_cast<std::vector<std::pair<std::string, H5L_type_t>>*>(data)->emplace_back(name, info->type);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &out) < 0) fail_h5(EIO, what);
  return out;
}

namespace {
// A name libhdf5 writes into a buffer after saying how long it is (H5Pget_virtual_*name).
template <class Get>
std::string try_name(Get get) {
  const ssize_t n = get(nullptr, 0);
  if (n <= 0) {
    clear();
    return "";
  }
  std::string name(static_cast<size_t>(n), '\0');
  if (get(name.data(), name.size() + 1) < 0) {
    clear();
    return "";
  }
  return name;
}
}  // namespace

namespace {
// A string libhdf5 allocated, freed once copied.
std::optional<std::string> take(char* s) {
  if (!s) {
    clear();
    return std::nullopt;
  }
  std::string out(s);
  H5free_memory(s);
  return out;
}
}  // namespace

std::optional<std::string> try_member_name(hid_t type, unsigned i) { return take(H5Tget_member_name(type, i)); }

std::optional<std::string> try_tag(hid_t type) { return take(H5Tget_tag(type)); }

std::string try_file_name(hid_t obj) {
  return try_name([&](char* buf, size_t size) { return H5Fget_name(obj, buf, size); });
}

std::string try_virtual_filename(hid_t dcpl, size_t i) {
  return try_name([&](char* buf, size_t size) { return H5Pget_virtual_filename(dcpl, i, buf, size); });
}

std::string try_virtual_dsetname(hid_t dcpl, size_t i) {
  return try_name([&](char* buf, size_t size) { return H5Pget_virtual_dsetname(dcpl, i, buf, size); });
}

}  // namespace h5d::h5
