#include "core/h5lib.h"

#include <dlfcn.h>

#include "core/error.h"

namespace h5d::h5 {

std::recursive_mutex& mutex() {
  static std::recursive_mutex mu;
  return mu;
}

void init_library() {
  static std::once_flag once;
  std::call_once(once, [] {
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

ChunkIterFn chunk_iter() {
  static ChunkIterFn fn = reinterpret_cast<ChunkIterFn>(dlsym(RTLD_DEFAULT, "H5Dchunk_iter"));
  return fn;
}

}  // namespace h5d::h5
