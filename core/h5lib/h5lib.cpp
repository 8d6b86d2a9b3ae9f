#include "core/h5lib/h5lib.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

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

}  // namespace h5d::h5
