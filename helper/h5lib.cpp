#include "helper/h5lib.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

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
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // fails only for a bad stack id: H5E_DEFAULT is none
  }
  return mu;
}

void release_free_lists() {
  auto lk = lock();
  if (H5garbage_collect() < 0) log::warn("H5garbage_collect failed: " + error_stack());
}

Handle transfer_for(hid_t file_type, hid_t mem_type, uint64_t elements) {
  auto lk = lock();
  // libhdf5's default (H5D_TEMP_BUF_SIZE); and a floor well above any element a metadata read
  // converts: libhdf5 refuses a buffer smaller than the largest form an element takes during its
  // conversion ("temporary buffer max size is too small"), which for strings and compounds is
  // larger than either type's H5Tget_size.
  constexpr uint64_t kDefault = 1u << 20, kFloor = 64u << 10;
  const uint64_t elem =
      std::max<uint64_t>({type_size(file_type, "file type"), type_size(mem_type, "memory type"), 1});
  Handle p = create_plist(H5P_DATASET_XFER);
  if (elem > kFloor / 16) return p;  // wide elements: libhdf5's own sizing
  const uint64_t need = elements > kDefault / elem ? kDefault : std::max<uint64_t>(elements, 1) * elem;
  set_buffer(p.get(), static_cast<size_t>(std::max(need, kFloor)));
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
    if (H5open() < 0) log::warn("H5open failed: " + error_stack());
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // fails only for a bad stack id: H5E_DEFAULT is none
  });
}

int load_filter_plugins() {
  Lock lk = lock();
  unsigned n = 0;
  if (H5PLsize(&n) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return 0;
  }
  int registered = 0;
  for (unsigned i = 0; i < n; ++i) {
    char dir[4096] = {};
    if (H5PLget(i, dir, sizeof dir) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      continue;
    }
    DIR* d = ::opendir(dir);
    if (!d) continue;
    std::vector<std::string> names;
    while (const struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());  // libhdf5 searches in directory order; any will do
    for (const std::string& name : names) {
      const std::string path = std::string(dir) + "/" + name;
      void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        const char* why = ::dlerror();
        log::warn("HDF5 filter plugin " + path + " not loaded: " + (why ? why : "?"));
        continue;
      }
      using TypeFn = H5PL_type_t (*)();
      using InfoFn = const void* (*)();
      auto type = reinterpret_cast<TypeFn>(::dlsym(lib, "H5PLget_plugin_type"));
      auto info = reinterpret_cast<InfoFn>(::dlsym(lib, "H5PLget_plugin_info"));
      const auto* cls = (type && info && type() == H5PL_TYPE_FILTER) ? static_cast<const H5Z_class2_t*>(info()) : nullptr;
      if (!cls || H5Zregister(cls) < 0) {
        H5Eclear2(H5E_DEFAULT);
        ::dlclose(lib);
        continue;
      }
      ++registered;  // the library stays loaded: libhdf5 calls into it
    }
  }
  if (H5PLset_loading_state(0) < 0) H5Eclear2(H5E_DEFAULT);
  return registered;
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
  const hid_t id = id_;
  id_ = -1;
  herr_t rc = -1;
  const char* kind = "id";
  switch (H5Iget_type(id)) {
    case H5I_FILE: kind = "file"; rc = H5Fclose(id); break;
    case H5I_GROUP: kind = "group"; rc = H5Gclose(id); break;
    case H5I_DATASET: kind = "dataset"; rc = H5Dclose(id); break;
    case H5I_DATATYPE: kind = "datatype"; rc = H5Tclose(id); break;
    case H5I_DATASPACE: kind = "dataspace"; rc = H5Sclose(id); break;
    case H5I_ATTR: kind = "attribute"; rc = H5Aclose(id); break;
    case H5I_GENPROP_LST: kind = "property list"; rc = H5Pclose(id); break;
    default: rc = H5Idec_ref(id) < 0 ? -1 : 0; break;
  }
  // Never thrown: reset runs in destructors. A failed close leaves the id open in libhdf5.
  if (rc < 0) log::warn("closing a libhdf5 " + std::string(kind) + " id failed: " + error_stack());
}

Handle check(hid_t id, const std::string& what, int code) {
  if (id < 0) fail_h5(code, what);
  return Handle(id);
}

void check(herr_t rc, const std::string& what, int code) {
  if (rc < 0) fail_h5(code, what);
}

bool failed() { return H5Eget_num(H5E_DEFAULT) > 0; }

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

Handle try_open_dataset(hid_t loc, const std::string& path) {
  return or_absent(H5Dopen2(loc, path.c_str(), H5P_DEFAULT));
}

Handle open_group(hid_t loc, const std::string& path, const std::string& what, int code) {
  return check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), what, code);
}

Handle try_open_group(hid_t loc, const std::string& path) {
  return or_absent(H5Gopen2(loc, path.c_str(), H5P_DEFAULT));
}

Handle try_open_object(hid_t loc, const std::string& path) {
  return or_absent(H5Oopen(loc, path.c_str(), H5P_DEFAULT));
}

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
  return check_nonneg(H5Sget_simple_extent_ndims(space), what + ": H5Sget_simple_extent_ndims");
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
  return check_nonneg(H5Sget_simple_extent_npoints(space), what + ": H5Sget_simple_extent_npoints");
}

size_t type_size(hid_t type, const std::string& what) {
  return check_not<size_t>(H5Tget_size(type), 0, what + ": H5Tget_size");
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


// ---- try_ variants of the dataset and attribute queries, and the value reads ----

Handle try_dataset_type(hid_t dset) { return or_absent(H5Dget_type(dset)); }
Handle try_dataset_space(hid_t dset) { return or_absent(H5Dget_space(dset)); }
Handle try_attribute_type(hid_t attr) { return or_absent(H5Aget_type(attr)); }
Handle try_attribute_space(hid_t attr) { return or_absent(H5Aget_space(attr)); }

bool try_read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer, void* buf,
              std::string& why) {
  if (H5Dread(dset, mem_type, mem_space, file_space, xfer, buf) >= 0) return true;
  why = error_stack();
  return false;
}

bool try_attribute_read(hid_t attr, hid_t mem_type, void* buf, std::string& why) {
  if (H5Aread(attr, mem_type, buf) >= 0) return true;
  why = error_stack();
  return false;
}

void free_memory(void* p, const std::string& what) {
  if (H5free_memory(p) < 0) log::warn(what + ": H5free_memory failed: " + error_stack());
}

// ---- H5S ----

H5S_class_t extent_type(hid_t space, const std::string& what) {
  return check_not(H5Sget_simple_extent_type(space), H5S_NO_CLASS, what + ": H5Sget_simple_extent_type");
}

H5S_sel_type select_type(hid_t space, const std::string& what) {
  return check_not(H5Sget_select_type(space), H5S_SEL_ERROR, what + ": H5Sget_select_type");
}

bool is_regular_hyperslab(hid_t space, const std::string& what) {
  const htri_t r = H5Sis_regular_hyperslab(space);
  if (r < 0) fail_h5(EIO, what + ": H5Sis_regular_hyperslab");
  return r > 0;
}

void regular_hyperslab(hid_t space, size_t rank, std::vector<hsize_t>& start, std::vector<hsize_t>& stride,
                       std::vector<hsize_t>& count, std::vector<hsize_t>& block, const std::string& what) {
  start.assign(rank, 0);
  stride.assign(rank, 0);
  count.assign(rank, 0);
  block.assign(rank, 0);
  check(H5Sget_regular_hyperslab(space, start.data(), stride.data(), count.data(), block.data()),
        what + ": H5Sget_regular_hyperslab");
}

void select_hyperslab(hid_t space, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                      const std::string& what) {
  check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
        what + ": H5Sselect_hyperslab");
}

Handle create_scalar_space() { return check(H5Screate(H5S_SCALAR), "H5Screate"); }

Handle create_simple_space(const std::vector<hsize_t>& dims) {
  return check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple");
}

// ---- H5P ----

Handle create_plist(hid_t cls) { return check(H5Pcreate(cls), "H5Pcreate"); }

hsize_t userblock(hid_t fcpl) {
  hsize_t ub = 0;
  check(H5Pget_userblock(fcpl, &ub), "H5Pget_userblock");
  return ub;
}

void sizes(hid_t fcpl, size_t& sizeof_offsets, size_t& sizeof_lengths) {
  check(H5Pget_sizes(fcpl, &sizeof_offsets, &sizeof_lengths), "H5Pget_sizes");
}

H5D_layout_t layout(hid_t dcpl, const std::string& what) {
  return check_not(H5Pget_layout(dcpl), H5D_LAYOUT_ERROR, what + ": H5Pget_layout");
}

std::vector<hsize_t> chunk_dims(hid_t dcpl, size_t rank, const std::string& what) {
  std::vector<hsize_t> dims(rank);
  if (H5Pget_chunk(dcpl, static_cast<int>(rank), dims.data()) < 0) fail_h5(EIO, what + ": H5Pget_chunk");
  return dims;
}

int nfilters(hid_t dcpl, const std::string& what) {
  return check_nonneg(H5Pget_nfilters(dcpl), what + ": H5Pget_nfilters");
}

PipelineFilter filter(hid_t dcpl, unsigned i, const std::string& what) {
  PipelineFilter f;
  size_t nelmts = 32;
  f.cd_values.assign(nelmts, 0);
  char name[256] = {0};
  unsigned config = 0;
  f.id = H5Pget_filter2(dcpl, i, &f.flags, &nelmts, f.cd_values.data(), sizeof name, name, &config);
  if (f.id >= 0 && nelmts > f.cd_values.size()) {  // more client values than asked for: ask again
    f.cd_values.assign(nelmts, 0);
    f.id = H5Pget_filter2(dcpl, i, &f.flags, &nelmts, f.cd_values.data(), sizeof name, name, &config);
  }
  if (f.id < 0) fail_h5(EIO, what + ": H5Pget_filter2");
  f.cd_values.resize(std::min(nelmts, f.cd_values.size()));
  f.name = name;
  return f;
}

H5D_fill_value_t fill_value_status(hid_t dcpl, const std::string& what) {
  H5D_fill_value_t fv = H5D_FILL_VALUE_ERROR;
  check(H5Pfill_value_defined(dcpl, &fv), what + ": H5Pfill_value_defined");
  return fv;
}

bool try_fill_value(hid_t dcpl, hid_t type, void* buf) {
  if (H5Pget_fill_value(dcpl, type, buf) >= 0) return true;
  clear();
  return false;
}

int external_count(hid_t dcpl, const std::string& what) {
  return check_nonneg(H5Pget_external_count(dcpl), what + ": H5Pget_external_count");
}

size_t virtual_count(hid_t dcpl, const std::string& what) {
  size_t n = 0;
  check(H5Pget_virtual_count(dcpl, &n), what + ": H5Pget_virtual_count");
  return n;
}

Handle virtual_vspace(hid_t dcpl, size_t i) { return check(H5Pget_virtual_vspace(dcpl, i), "H5Pget_virtual_vspace"); }

Handle virtual_srcspace(hid_t dcpl, size_t i) {
  return check(H5Pget_virtual_srcspace(dcpl, i), "H5Pget_virtual_srcspace");
}

void set_buffer(hid_t xfer, size_t size) { check(H5Pset_buffer(xfer, size, nullptr, nullptr), "H5Pset_buffer"); }

void set_file_locking(hid_t fapl, bool use, bool ignore_when_disabled) {
  check(H5Pset_file_locking(fapl, use, ignore_when_disabled), "H5Pset_file_locking");
}

void set_driver(hid_t fapl, hid_t driver) { check(H5Pset_driver(fapl, driver, nullptr), "H5Pset_driver"); }

void set_chunk(hid_t dcpl, const std::vector<hsize_t>& dims, const std::string& what) {
  check(H5Pset_chunk(dcpl, static_cast<int>(dims.size()), dims.data()), what + ": H5Pset_chunk");
}

void set_deflate(hid_t dcpl, unsigned level) { check(H5Pset_deflate(dcpl, level), "H5Pset_deflate"); }

void set_shuffle(hid_t dcpl) { check(H5Pset_shuffle(dcpl), "H5Pset_shuffle"); }

void set_filter(hid_t dcpl, H5Z_filter_t id, unsigned flags, const std::vector<unsigned>& cd_values,
                const std::string& what) {
  check(H5Pset_filter(dcpl, id, flags, cd_values.size(), cd_values.data()), what);
}

void set_layout(hid_t dcpl, H5D_layout_t l) { check(H5Pset_layout(dcpl, l), "H5Pset_layout"); }

void set_alloc_time(hid_t dcpl, H5D_alloc_time_t t) { check(H5Pset_alloc_time(dcpl, t), "H5Pset_alloc_time"); }

void set_fill_time(hid_t dcpl, H5D_fill_time_t t) { check(H5Pset_fill_time(dcpl, t), "H5Pset_fill_time"); }

// ---- H5D ----

Handle create_dataset(hid_t loc, const std::string& path, hid_t type, hid_t space, hid_t dcpl,
                      const std::string& what) {
  return check(H5Dcreate2(loc, path.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), what + ": H5Dcreate");
}

haddr_t try_dataset_offset(hid_t dset) {
  const haddr_t a = H5Dget_offset(dset);
  if (a == HADDR_UNDEF) clear();
  return a;
}

hsize_t try_storage_size(hid_t dset) {
  const hsize_t n = H5Dget_storage_size(dset);
  if (n == 0) clear();
  return n;
}

H5D_space_status_t try_space_status(hid_t dset) {
  H5D_space_status_t s = H5D_SPACE_STATUS_ERROR;
  if (H5Dget_space_status(dset, &s) < 0) {
    clear();
    return H5D_SPACE_STATUS_ERROR;
  }
  return s;
}

bool try_chunk_info(hid_t dset, const std::vector<hsize_t>& offset, unsigned& mask, haddr_t& addr, hsize_t& size) {
  if (H5Dget_chunk_info_by_coord(dset, offset.data(), &mask, &addr, &size) >= 0) return true;
  clear();
  return false;
}

hsize_t chunk_storage_size(hid_t dset, const std::vector<hsize_t>& offset, const std::string& what) {
  hsize_t n = 0;
  check(H5Dget_chunk_storage_size(dset, offset.data(), &n), what + ": H5Dget_chunk_storage_size");
  return n;
}

void read_chunk(hid_t dset, const std::vector<hsize_t>& offset, uint32_t& filter_mask, void* buf,
                const std::string& what) {
  check(H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &filter_mask, buf), what + ": H5Dread_chunk");
}

bool try_read_chunk(hid_t dset, const std::vector<hsize_t>& offset, uint32_t& filter_mask, void* buf) {
  if (H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &filter_mask, buf) >= 0) return true;
  clear();
  return false;
}

void write_chunk(hid_t dset, const std::vector<hsize_t>& offset, const void* buf, size_t size,
                 const std::string& what) {
  check(H5Dwrite_chunk(dset, H5P_DEFAULT, 0, offset.data(), size, buf), what + ": H5Dwrite_chunk");
}

// ---- H5F ----

Handle try_open_file(const std::string& path, hid_t fapl, std::string& why) {
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  if (!f) why = error_stack();  // clears the stack
  return f;
}

Handle create_file(const std::string& path, unsigned flags, hid_t fapl, const std::string& what) {
  return check(H5Fcreate(path.c_str(), flags, H5P_DEFAULT, fapl), what);
}

void flush(hid_t file, const std::string& what) { check(H5Fflush(file, H5F_SCOPE_LOCAL), what); }

Handle file_create_plist(hid_t file) { return check(H5Fget_create_plist(file), "H5Fget_create_plist"); }

hsize_t file_size(hid_t file) {
  hsize_t n = 0;
  check(H5Fget_filesize(file, &n), "H5Fget_filesize");
  return n;
}

int vfd_descriptor(hid_t file, const std::string& what) {
  void* vfd = nullptr;
  check(H5Fget_vfd_handle(file, H5P_DEFAULT, &vfd), what + ": H5Fget_vfd_handle");
  if (!vfd) fail(EIO, what + ": H5Fget_vfd_handle gave no file descriptor");
  return *static_cast<int*>(vfd);
}

bool try_has_mdc_image(hid_t file) {
  haddr_t addr = HADDR_UNDEF;
  hsize_t len = 0;
  if (H5Fget_mdc_image_info(file, &addr, &len) < 0) {
    clear();
    return false;
  }
  return addr != HADDR_UNDEF && len > 0;
}

Handle file_of(hid_t obj) { return check(H5Iget_file_id(obj), "H5Iget_file_id"); }

// ---- H5G, H5L, H5O ----

Handle create_group(hid_t loc, const std::string& path, const std::string& what) {
  return check(H5Gcreate2(loc, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), what + ": H5Gcreate");
}

bool link_exists(hid_t loc, const std::string& path, const std::string& what) {
  const htri_t r = H5Lexists(loc, path.c_str(), H5P_DEFAULT);
  if (r < 0) fail_h5(EIO, what + ": H5Lexists");
  return r > 0;
}

std::optional<std::pair<std::string, std::string>> try_unpack_external_link(const std::vector<char>& value) {
  const char* file = nullptr;
  const char* obj = nullptr;
  if (H5Lunpack_elink_val(value.data(), value.size(), nullptr, &file, &obj) < 0) {
    clear();
    return std::nullopt;
  }
  return std::make_pair(std::string(file ? file : ""), std::string(obj ? obj : ""));
}

void visit(hid_t loc, const std::string& path, H5O_iterate_t cb, void* data, unsigned fields,
           const std::string& what) {
  check(H5Ovisit_by_name2(loc, path.c_str(), H5_INDEX_NAME, H5_ITER_INC, cb, data, fields, H5P_DEFAULT), what);
}

}  // namespace h5d::h5
