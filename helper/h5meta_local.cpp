// euxfel::meta's questions answered by libhdf5 in this process (h5meta_local.h).
#include "helper/h5meta_local.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "helper/h5local.h"
#include "helper/h5lib.h"
#include "helper/h5types_api.h"

namespace h5d::euxfel::meta::local {
namespace {

using h5::Handle;

// Every intermediate link of `path` must exist before H5Oexists_by_name may be asked.
bool exists_locked(hid_t fid, const std::string& path) {
  if (path.empty() || path == "/") return true;
  size_t pos = 0;
  while (true) {
    size_t next = path.find('/', pos + 1);
    std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" &&
        (!h5::try_link_exists(fid, prefix) || !h5::try_object_exists(fid, prefix)))
      return false;
    if (next == std::string::npos) return true;
    pos = next;
  }
}

H5O_type_t type_locked(hid_t fid, const std::string& path) {
  // A missing link (at any level) makes the call fail; library error printing is off.
  const auto info = h5::try_object_info(fid, path, H5O_INFO_BASIC);
  return info ? info->type : H5O_TYPE_UNKNOWN;
}

// Reads elements [0, min(n, extent)) of the dataset `path` relative to `loc` (a file or group
// handle). Returns false, reading nothing, when there is no such dataset. Caller holds the lock.
template <class T>
bool read_ints_at(hid_t loc, const std::string& what, const std::string& path, uint64_t n,
                  hid_t memtype, std::vector<T>& out) {
  Handle d = h5::try_open_dataset(loc, path);
  if (!d) return false;
  Handle space = h5::dataset_space(d.get(), what);
  const std::vector<hsize_t> dims = h5::extent_dims(space.get(), what);
  const int rank = static_cast<int>(dims.size());
  uint64_t count = rank == 0 ? 1 : std::min<uint64_t>(n, dims[0]);
  out.assign(count, T{});
  if (count == 0) return true;
  if (rank > 0) {
    std::vector<hsize_t> start(static_cast<size_t>(rank), 0), cnt(static_cast<size_t>(rank), 1);
    cnt[0] = count;
    h5::select_hyperslab(space.get(), start, cnt, what);
  }
  Handle mspace = h5::create_simple_space({static_cast<hsize_t>(count)});
  Handle ftype = h5::dataset_type(d.get(), what);
  Handle xfer = h5::transfer_for(ftype.get(), memtype, count);
  h5::read(d.get(), memtype, mspace.get(), space.get(), xfer.get(), out.data(), what + ": read");
  return true;
}

template <class T>
bool try_read_ints(H5File& f, const std::string& path, uint64_t n, hid_t memtype,
                   std::vector<T>& out) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  return read_ints_at<T>(local_handle(f), f.path() + ":" + path, path, n, memtype, out);
}

struct VisitState {
  std::vector<std::string> names;
};

herr_t visit_cb(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<VisitState*>(data)->names.emplace_back(name);
  return 0;
}

}  // namespace

bool exists(H5File& f, const std::string& path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  return exists_locked(local_handle(f), path);
}

bool is_dataset(H5File& f, const std::string& path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  return type_locked(local_handle(f), path) == H5O_TYPE_DATASET;
}

bool is_group(H5File& f, const std::string& path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  return type_locked(local_handle(f), path) == H5O_TYPE_GROUP;
}

std::string soft_link_target(H5File& f, const std::string& path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  // H5Lget_info fails (quietly: error printing is off) when any component is missing.
  const auto info = h5::try_link_info(fid, path);
  if (!info || info->type != H5L_TYPE_SOFT) return "";
  const auto buf = h5::try_link_value(fid, path, info->u.val_size);
  return buf ? std::string(buf->data()) : "";
}

bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) {
  return try_read_ints<uint64_t>(f, path, n, H5T_NATIVE_UINT64, out);
}

bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) {
  return try_read_ints<int64_t>(f, path, n, H5T_NATIVE_INT64, out);
}

std::vector<IndexArrays> read_index(H5File& f, const std::string& base,
                                    const std::vector<std::string>& groups, uint64_t n) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  std::vector<IndexArrays> out(groups.size());
  hid_t fid = local_handle(f);
  Handle g = h5::try_open_group(fid, base);
  if (!g) {
    for (auto& r : out) r.error = f.path() + ":" + base + ": no such group";
    return out;
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    IndexArrays& r = out[i];
    const std::string rel = groups[i].empty() ? "" : groups[i] + "/";
    const std::string what = f.path() + ":" + base + "/" + rel;
    try {
      if (!read_ints_at<uint64_t>(g.get(), what + "first", rel + "first", n, H5T_NATIVE_UINT64,
                                  r.firsts)) {
        r.error = what + "first: no such dataset";
        continue;
      }
      if (read_ints_at<uint64_t>(g.get(), what + "count", rel + "count", n, H5T_NATIVE_UINT64,
                                 r.counts))
        continue;
      // Format 0.1: count = (last - first + 1) * status
      std::vector<int64_t> last, status;
      if (!read_ints_at<int64_t>(g.get(), what + "last", rel + "last", n, H5T_NATIVE_INT64, last) ||
          !read_ints_at<int64_t>(g.get(), what + "status", rel + "status", n, H5T_NATIVE_INT64,
                                 status)) {
        r.firsts.clear();
        r.error = what + "count (or last and status): no such dataset";
        continue;
      }
      size_t m = std::min({r.firsts.size(), last.size(), status.size()});
      r.counts.resize(m);
      for (size_t k = 0; k < m; ++k)
        r.counts[k] = static_cast<uint64_t>((last[k] - int64_t(r.firsts[k]) + 1) * status[k]);
    } catch (const std::exception& e) {
      r.firsts.clear();
      r.counts.clear();
      r.error = e.what();
    }
  }
  return out;
}

std::vector<std::string> read_strings(H5File& f, const std::string& path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  const std::string what = f.path() + ":" + path;
  Handle d = h5::try_open_dataset(fid, path);
  if (!d) fail(ENOENT, what + ": no such dataset");
  Handle ftype = h5::dataset_type(d.get(), what);
  if (h5::type_class(ftype.get()) != H5T_STRING) fail(EINVAL, what + ": not a string dataset");
  Handle space = h5::dataset_space(d.get(), what);
  const hssize_t npoints = h5::extent_npoints(space.get(), what);
  std::vector<std::string> out;
  if (npoints <= 0) return out;
  const size_t n = static_cast<size_t>(npoints);
  out.reserve(n);
  if (h5::is_variable_str(ftype.get())) {
    Handle mtype = h5::copy_type(H5T_C_S1);
    h5::set_size(mtype.get(), H5T_VARIABLE);
    h5::set_cset(mtype.get(), h5::type_cset(ftype.get()));
    std::vector<char*> ptrs(n, nullptr);
    Handle xfer = h5::transfer_for(ftype.get(), mtype.get(), n);
    h5::read(d.get(), mtype.get(), H5S_ALL, H5S_ALL, xfer.get(), ptrs.data(), what + ": read");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    h5::vlen_reclaim(mtype.get(), space.get(), ptrs.data(), what);
  } else {
    const size_t sz = h5::type_size(ftype.get(), what);
    Handle mtype = h5::copy_type(H5T_C_S1);
    h5::set_size(mtype.get(), sz);
    h5::set_strpad(mtype.get(), H5T_STR_NULLPAD);
    std::vector<char> buf(sz * n);
    Handle xfer = h5::transfer_for(ftype.get(), mtype.get(), n);
    h5::read(d.get(), mtype.get(), H5S_ALL, H5S_ALL, xfer.get(), buf.data(), what + ": read");
    for (size_t i = 0; i < n; ++i) {
      const char* p = buf.data() + i * sz;
      out.emplace_back(p, strnlen(p, sz));
    }
  }
  return out;
}

std::vector<std::string> list_datasets(H5File& f, const std::string& group_path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  VisitState st;
  if (type_locked(fid, group_path) != H5O_TYPE_GROUP) return st.names;
  h5::visit(fid, group_path, visit_cb, &st, H5O_INFO_BASIC, f.path() + ":" + group_path + ": visit");
  std::sort(st.names.begin(), st.names.end());
  return st.names;
}

std::vector<std::string> list_members(H5File& f, const std::string& group_path) {
  h5::init_library();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  std::vector<std::string> names;
  if (type_locked(fid, group_path) != H5O_TYPE_GROUP) return names;
  Handle g = h5::open_group(fid, group_path, f.path() + ":" + group_path, EIO);
  for (auto& link : h5::links(g.get(), f.path() + ":" + group_path + ": iterate")) names.push_back(std::move(link.first));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace h5d::euxfel::meta::local
