// LocalMetadata (h5local.h): the read side's libhdf5 calls, in this process.
#include "helper/h5local.h"
#include "core/write/write_internal.h"
#include "helper/serve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <list>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/fmt/chunk_index.h"
#include "helper/h5lib.h"
#include "helper/h5types.h"
#include "helper/h5meta_local.h"
#include "core/log.h"

namespace h5d {
namespace {

// Files whose libhdf5 handle is open, most recent first; bounded so that a tree of thousands of
// files never holds more than a few hundred descriptors. Guarded by the HDF5 lock.
struct Open;
std::list<Open*>& open_handles() {
  static std::list<Open*> l;
  return l;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string dirname_of(const std::string& p) {
  auto pos = p.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return p.substr(0, pos);
}

std::string basename_of(const std::string& p) {
  auto pos = p.rfind('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string join_h5(const std::string& group, const std::string& name) {
  return group == "/" ? "/" + name : group + "/" + name;
}

// User block and address sizes of the file (what fmt needs to read its structures).
fmt::FileGeometry read_geometry(hid_t fid) {
  fmt::FileGeometry geo;
  h5::Handle fcpl = h5::file_create_plist(fid);
  geo.base = h5::userblock(fcpl.get());
  size_t so = 8, sl = 8;
  h5::sizes(fcpl.get(), so, sl);
  geo.sizeof_offsets = static_cast<uint8_t>(so);
  geo.sizeof_lengths = static_cast<uint8_t>(sl);
  return geo;
}

// The object at `object_path` (a group or dataset); Error(ENOENT) when there is none.
h5::Handle open_object(hid_t fid, const std::string& file, const std::string& object_path) {
  h5::Handle obj = h5::try_open_object(fid, object_path);
  if (!obj) fail(ENOENT, file + ":" + object_path + ": no such object");
  return obj;
}

Hyperslab read_selection(hid_t space) {
  Hyperslab h;
  const std::vector<hsize_t> dims = h5::extent_dims(space, "VDS selection");
  H5S_sel_type t = h5::select_type(space, "VDS selection");
  if (t == H5S_SEL_ALL) {
    h.is_all = true;
    h.start.assign(dims.size(), 0);
    h.stride.assign(dims.size(), 1);
    h.count.assign(dims.size(), 1);
    h.block.assign(dims.begin(), dims.end());
    return h;
  }
  if (t != H5S_SEL_HYPERSLABS || !h5::is_regular_hyperslab(space, "VDS selection"))
    fail(ENOTSUP, "selection is not a regular hyperslab");
  std::vector<hsize_t> start, stride, count, block;
  h5::regular_hyperslab(space, dims.size(), start, stride, count, block, "VDS selection");
  h.start.assign(start.begin(), start.end());
  h.stride.assign(stride.begin(), stride.end());
  h.count.assign(count.begin(), count.end());
  h.block.assign(block.begin(), block.end());
  return h;
}

}  // namespace

// HDF5's rules for a VDS source file name: "." is the VDS's own file; a relative name is tried
// against each HDF5_VDS_PREFIX entry (${ORIGIN} = the VDS file's directory), then the VDS file's
// directory; an absolute name that does not exist is retried by its base name there.
static std::string resolve_vds_source(const std::string& vds_file, const std::string& name) {
  if (name == ".") return vds_file;
  const std::string origin = dirname_of(vds_file);
  std::vector<std::string> candidates;
  if (!name.empty() && name[0] == '/') {
    candidates.push_back(name);
    candidates.push_back(join_path(origin, basename_of(name)));
  } else {
    if (const char* pre = std::getenv("HDF5_VDS_PREFIX")) {
      std::string all(pre);
      size_t pos = 0;
      while (pos <= all.size()) {
        size_t end = all.find(':', pos);
        if (end == std::string::npos) end = all.size();
        std::string dir = all.substr(pos, end - pos);
        const std::string token = "${ORIGIN}";
        auto o = dir.find(token);
        if (o != std::string::npos) dir.replace(o, token.size(), origin);
        if (!dir.empty()) candidates.push_back(join_path(dir, name));
        pos = end + 1;
      }
    }
    candidates.push_back(join_path(origin, name));
  }
  for (const auto& c : candidates)
    if (file_exists(c)) return c;
  return "";
}

namespace {

// What this process keeps of an H5File: its libhdf5 handle, opened on first use and closed
// again when too many are open (bounded open files) or when the H5File goes away.
struct Open final : H5File::LocalState {
  h5::Handle fid;
  bool truncation_logged = false;
  ~Open() override {
    h5::Lock lk = h5::lock();
    if (fid) {
      fid.reset();
      open_handles().remove(this);
    }
  }
};

// The file through the truncated-file driver (h5lib.h) when that is allowed in this process
// and the file is shorter than its stored end; an empty Handle otherwise (`why`: what libhdf5
// said then, when it refused that too). Caller holds the HDF5 lock.
h5::Handle open_truncated(H5File& f, Open& o, std::string& why) {
  // Only where the caller checks every answer for reads past the cut (the helper: serve).
  if (!h5::truncated_files_allowed()) return h5::Handle();
  uint64_t size = 0, eoa = 0;
  std::string reason;
  h5::Handle fid = h5::open_truncated(f.path(), &size, &eoa, &reason);
  if (!fid) {
    why = "; opened as a truncated file: " + reason;
    return fid;
  }
  if (size >= eoa) return h5::Handle();  // not truncated: refused for another reason, reported as it was
  if (!o.truncation_logged) {
    o.truncation_logged = true;
    log::warn(f.path() + ": truncated: " + std::to_string(size) + " of the " + std::to_string(eoa) +
              " bytes its superblock gives; serving what lies before the cut (objects and chunks past it: EIO)");
  }
  return fid;
}

}  // namespace

hid_t local_handle(H5File& f) {
  // Caller holds the HDF5 lock.
  auto& state = f.local_state();
  if (!state) state = std::make_unique<Open>();
  Open& o = static_cast<Open&>(*state);
  auto& lru = open_handles();
  if (o.fid) {
    auto it = std::find(lru.begin(), lru.end(), &o);
    if (it != lru.begin() && it != lru.end()) lru.splice(lru.begin(), lru, it);
    return o.fid.get();
  }
  const size_t limit = std::max<size_t>(4, f.engine().options().max_open_files / 2);
  while (lru.size() >= limit) {
    Open* victim = lru.back();
    lru.pop_back();
    victim->fid.reset();
  }
  const std::string& path = f.path();
  // Metadata read from a handle opened on a newer file must never mix with what we hold.
  if (f.identity().ino != 0) FdCache::verify(path, f.identity());
  std::string why;
  h5::Handle fid = h5::try_open_file(path, H5P_DEFAULT, why);  // unlocked: see init_library
  if (!fid) {
    int code = file_exists(path) ? (::access(path.c_str(), R_OK) == 0 ? EIO : EACCES) : ENOENT;
    std::string why_truncated;
    if (code == EIO) fid = open_truncated(f, o, why_truncated);
    if (!fid) fail(code, path + ": cannot open as HDF5: " + why + why_truncated);
  }
  o.fid = std::move(fid);
  lru.push_front(&o);
  return o.fid.get();
}

namespace {
// The file's bytes for our own parsers (object headers, layout messages), through the descriptor
// libhdf5 has open (a duplicate of it): no second open of the file (in a sandboxed helper each
// open is a round trip to the daemon). Callers hold the HDF5 lock.
std::shared_ptr<const OpenFd> file_bytes(H5File& f, hid_t fid) {
  const int fd = ::fcntl(h5::vfd_descriptor(fid, f.path()), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) fail(errno, f.path() + ": cannot duplicate libhdf5's descriptor: " + std::strerror(errno));
  return std::make_shared<const OpenFd>(fd, f.path(), f.identity());
}
}  // namespace

std::vector<LinkEntry> LocalMetadata::list_group(H5File& f, const std::string& group_path) {
  const std::string& file_path = f.path();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  // The root group always exists: a file whose root cannot be opened is damaged (EIO, logged
  // with libhdf5's reason), not empty.
  h5::Handle g = group_path == "/" ? h5::open_group(fid, group_path, file_path + ": cannot open the root group", EIO)
                                   : h5::try_open_group(fid, group_path);
  if (!g) fail(ENOENT, file_path + ":" + group_path + ": not a group");
  const auto links = h5::links(g.get(), file_path + ":" + group_path + ": cannot list group");
  // The groups on the way here, by (file, object address): a hard, soft or external link back
  // to one of them would make an endless tree.
  struct Ancestor {
    unsigned long fileno;
    haddr_t addr;
    std::string path;
  };
  std::vector<Ancestor> ancestors;  // the root first
  for (size_t pos = 1; pos <= group_path.size(); ++pos) {
    if (pos != 1 && pos != group_path.size() && group_path[pos] != '/') continue;
    const std::string prefix = pos == 1 ? "/" : group_path.substr(0, pos);
    if (const auto oi = h5::try_object_info(fid, prefix, H5O_INFO_BASIC))
      ancestors.push_back({oi->fileno, oi->addr, prefix});
  }
  std::vector<LinkEntry> out;
  for (const auto& [name, ltype] : links) {
    LinkEntry e;
    e.name = name;
    const size_t refused = h5::pending_reads_past_end();
    const auto found = h5::try_object_info(g.get(), name, H5O_INFO_BASIC);
    if (!found) {  // dangling soft or external link: not shown
      if (h5::pending_reads_past_end() > refused) {
        // Its object header lies past the cut of a truncated file (h5truncated.cpp): libhdf5
        // could not load it and kept nothing of it; the group's other members are intact.
        h5::forget_reads_past_end(refused);
        log::warn(file_path + ":" + join_h5(group_path, name) +
                  ": left out, its object header lies past the end of the truncated file");
      }
      continue;
    }
    const H5O_info_t& oinfo = *found;
    if (oinfo.type == H5O_TYPE_GROUP) {  // the nearest one, should a path pass a group twice
      auto up = std::find_if(ancestors.rbegin(), ancestors.rend(), [&](const Ancestor& a) {
        return a.fileno == oinfo.fileno && a.addr == oinfo.addr;
      });
      if (up != ancestors.rend()) e.ancestor = up->path;
    }
    e.kind = oinfo.type == H5O_TYPE_GROUP ? ObjectKind::Group
             : oinfo.type == H5O_TYPE_DATASET ? ObjectKind::Dataset : ObjectKind::Other;
    if (ltype == H5L_TYPE_SOFT || ltype == H5L_TYPE_EXTERNAL) {
      const auto li = h5::try_link_info(g.get(), name);
      const auto val = li ? h5::try_link_value(g.get(), name, li->u.val_size) : std::nullopt;
      if (val) {
        const std::vector<char>& buf = *val;
        if (ltype == H5L_TYPE_SOFT) {
          std::string t(buf.data());
          e.soft_target = (!t.empty() && t[0] == '/') ? t : join_h5(group_path, t);
        } else {
          // Not one libhdf5 can unpack: the target stays unnamed.
          if (const auto target = h5::try_unpack_external_link(buf)) e.soft_target = target->first + ":" + target->second;
          // The file libhdf5 found for it (H5Oget_info above opened it).
          if (h5::Handle o = h5::try_open_object(g.get(), name)) e.file = h5::try_file_name(o.get());
          // A relative name libhdf5 found beside this file rather than in the working directory.
          if (!e.file.empty() && e.file[0] != '/' && !file_exists(e.file)) {
            const std::string beside = join_path(dirname_of(file_path), e.file);
            if (file_exists(beside)) e.file = beside;
          }
        }
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

ObjectKind LocalMetadata::kind_of(H5File& f, const std::string& path) {
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  if (path == "/") return ObjectKind::Group;
  // Check every component exists before asking for the object (H5Oget_info_by_name on a
  // missing intermediate group only fails, but be explicit).
  const auto oinfo = h5::try_link_exists(fid, path) ? h5::try_object_info(fid, path, H5O_INFO_BASIC) : std::nullopt;
  if (!oinfo) return ObjectKind::Other;
  return oinfo->type == H5O_TYPE_GROUP ? ObjectKind::Group
         : oinfo->type == H5O_TYPE_DATASET ? ObjectKind::Dataset : ObjectKind::Other;
}

namespace {
std::function<void(const std::string&)>& attribute_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

// One attribute of the open object `obj` of `file`, by name; caller holds the HDF5 lock.
Value read_attribute(hid_t obj, const std::string& file, const std::string& name) {
  if (attribute_hook()) attribute_hook()(file + "@" + name);
  std::string why;
  h5::Handle a = h5::try_open_attribute(obj, name, why);
  return a ? h5::read_value(a.get(), true, 10000) : Value::string("unreadable: " + why);
}
}  // namespace

void LocalMetadata::set_attribute_hook(std::function<void(const std::string&)> hook) { attribute_hook() = std::move(hook); }

std::vector<std::pair<std::string, Value>> LocalMetadata::attributes(H5File& f, const std::string& object_path) {
  const std::vector<std::string> names = attribute_names(f, object_path);
  std::vector<std::pair<std::string, Value>> out;
  if (names.empty()) return out;
  h5::Lock lk = h5::lock();
  h5::Handle obj = open_object(local_handle(f), f.path(), object_path);
  for (const std::string& name : names) out.emplace_back(name, read_attribute(obj.get(), f.path(), name));
  return out;
}

std::vector<std::string> LocalMetadata::attribute_names(H5File& f, const std::string& object_path) {
  const std::string& file_path = f.path();
  H5O_info_t oinfo;
  fmt::FileGeometry geo;
  std::shared_ptr<const OpenFd> bytes;  // read after the lock is let go
  {
    h5::Lock lk = h5::lock();
    hid_t fid = local_handle(f);
    h5::Handle obj = open_object(fid, file_path, object_path);
    const auto got = h5::try_object_info(obj.get(), H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS);
    if (!got) return {};
    oinfo = *got;
    geo = read_geometry(fid);
    if (oinfo.num_attrs != 0) bytes = file_bytes(f, fid);
  }
  if (oinfo.num_attrs == 0) return {};
  // From the object header, without libhdf5: it decodes every attribute's type to list any one
  // of them, and one it cannot decode fails (or crashes) the whole list.
  std::string why;
  try {
    fmt::AttributeNames an = fmt::read_attribute_names(*bytes, geo, oinfo.addr);
    if (an.complete && an.names.size() == oinfo.num_attrs) return an.names;
  } catch (const std::exception& e) {
    why = e.what();
  }
  // Dense or shared attribute storage (or a header we could not read): libhdf5's own list.
  h5::Lock lk = h5::lock();
  h5::Handle obj = h5::try_open_object(local_handle(f), object_path);
  std::vector<std::string> names;
  std::string stack = "cannot open it";
  if (!obj || !h5::try_attribute_names(obj.get(), names, stack))
    log::warn(file_path + ":" + object_path + ": cannot list its attributes: " + stack + (why.empty() ? "" : "; " + why));
  return names;
}

Value LocalMetadata::attribute(H5File& f, const std::string& object_path, const std::string& name) {
  h5::Lock lk = h5::lock();
  h5::Handle obj = open_object(local_handle(f), f.path(), object_path);
  return read_attribute(obj.get(), f.path(), name);
}

Value LocalMetadata::read_value(H5File& f, const std::string& dset_path, uint64_t max_elements) {
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  h5::Handle d = h5::try_open_dataset(fid, dset_path);
  if (!d) fail(ENOENT, f.path() + ":" + dset_path + ": no such dataset");
  return h5::read_value(d.get(), false, max_elements);
}

namespace {

// The steps of LocalMetadata::dataset_info, each one group of libhdf5 calls; callers hold the HDF5 lock.

// A dataset reached through an external link lives in another file: its (file, path) there, or
// ("", "") when `dset_path` is no external link or its file is not found.
std::pair<std::string, std::string> external_link_target(hid_t fid, const std::string& file,
                                                         const std::string& dset_path) {
  std::pair<std::string, std::string> out;
  const auto li = h5::try_link_info(fid, dset_path);
  if (!li || li->type != H5L_TYPE_EXTERNAL) return out;
  const auto buf = h5::try_link_value(fid, dset_path, li->u.val_size);
  // One libhdf5 cannot unpack: no external link to follow.
  const auto link = buf ? h5::try_unpack_external_link(*buf) : std::nullopt;
  if (link) {
    std::string target = resolve_vds_source(file, link->first);
    if (!target.empty()) out = {target, link->second};
  }
  return out;
}

// Shape, maxshape and element type; array element types folded into the shape (`folded`).
// `file_size` (0: unknown) bounds the element size of a dataset with storage: one stored element
// larger than the whole file cannot be, so its type size is damaged; it is shown as a non-array
// rather than allocating buffers (the fill value's) of that size. A dataset without storage
// (all fill: h5repack_objs.h5 /arrayd, one element of 128 MiB in a 19 KiB file) is what it says.
// Returns false for such a type (nothing more about the dataset may be asked of libhdf5).
bool read_type_and_shape(hid_t d, hid_t ftype, hid_t space, uint64_t file_size, DatasetInfo& info, StorageInfo& st,
                         Shape& folded) {
  const std::string what = info.file + ":" + info.path;
  std::vector<hsize_t> maxdims;
  const std::vector<hsize_t> dims = h5::extent_dims(space, what, &maxdims);
  const bool null_space = h5::extent_type(space, what) == H5S_NULL;
  info.shape.assign(dims.begin(), dims.end());
  for (auto m : maxdims) info.maxshape.push_back(m == H5S_UNLIMITED ? ~uint64_t(0) : m);
  st.ds_rank = info.shape.size();
  const size_t type_size = h5::type_size(ftype, what);
  // Asked only in this rare case: for a chunked dataset libhdf5 walks the chunk index (one it
  // cannot walk counts as allocated).
  if (file_size && type_size > file_size && h5::try_space_status(d) != H5D_SPACE_STATUS_NOT_ALLOCATED) {
    info.is_array = false;
    info.why_not_array = "element of " + std::to_string(type_size) + " bytes, larger than the file (" +
                         std::to_string(file_size) + " bytes): a damaged datatype";
    info.hdf5_type = "datatype of " + std::to_string(type_size) + " bytes";
    return false;
  }
  info.is_array = h5::dtype_from_h5(ftype, info.dtype, folded, info.why_not_array, info.hdf5_type);
  if (null_space && info.is_array) {
    info.is_array = false;
    info.why_not_array = "null dataspace (no elements)";
  }
  std::string conversion;
  if (info.is_array && h5::needs_conversion(ftype, conversion)) {
    info.convert_type = true;
    st.library_only = true;
    st.library_reason = conversion + " (converted by libhdf5)";
  }
  if (info.is_array && !folded.empty()) {  // itemsize is that of the base element now
    info.shape.insert(info.shape.end(), folded.begin(), folded.end());
    info.maxshape.insert(info.maxshape.end(), folded.begin(), folded.end());
  }
  return true;
}

void read_layout_and_filters(hid_t dcpl, size_t ds_rank, DatasetInfo& info) {
  const std::string what = info.file + ":" + info.path;
  switch (h5::layout(dcpl, what)) {
    case H5D_COMPACT: info.layout = "compact"; break;
    case H5D_CONTIGUOUS: info.layout = "contiguous"; break;
    case H5D_CHUNKED: info.layout = "chunked"; break;
    case H5D_VIRTUAL: info.layout = "virtual"; break;
    default: info.layout = "unknown"; break;
  }
  if (info.layout == "chunked") {
    const std::vector<hsize_t> cd = h5::chunk_dims(dcpl, ds_rank, what);
    info.chunks.assign(cd.begin(), cd.end());
  }
  for (int i = 0, nf = h5::nfilters(dcpl, what); i < nf; ++i) {
    h5::PipelineFilter pf = h5::filter(dcpl, static_cast<unsigned>(i), what);
    FilterInfo f;
    f.id = static_cast<int>(pf.id);
    f.flags = pf.flags;
    f.name = std::move(pf.name);
    f.cd_values = std::move(pf.cd_values);
    info.filters.push_back(std::move(f));
  }
}

// One element's bytes in the file type (no conversion); zeros when undefined.
void read_fill_value(hid_t dcpl, hid_t ftype, DatasetInfo& info) {
  // Types served converted (DatasetInfo::convert_type): the fill value converted alike.
  h5::Handle mtype;
  if (info.convert_type) {
    try {
      mtype = h5::standard_type(ftype);
    } catch (const Error&) {
    }
  }
  const hid_t ftype_served = mtype ? mtype.get() : ftype;
  // Non-arrays have no fill value to serve (and a damaged type size must not size a buffer).
  if (!info.is_array) return;
  const std::string what = info.file + ":" + info.path;
  size_t h5_elem = h5::type_size(ftype_served, what);
  info.fill_value.assign(h5_elem, 0);
  // A fill value libhdf5 cannot convert to the type served: none to serve (zeros).
  if (h5::fill_value_status(dcpl, what) == H5D_FILL_VALUE_USER_DEFINED &&
      h5::try_fill_value(dcpl, ftype_served, info.fill_value.data()))
    info.fill_value_defined = true;
  if (info.is_array && h5_elem != info.dtype.itemsize && info.dtype.itemsize &&
      h5_elem % info.dtype.itemsize == 0) {
    // Array element type folded into the shape: the fill value is that of one base element.
    info.fill_value.resize(info.dtype.itemsize);
  }
}

// Where the bytes are: object header, user block and address sizes, contiguous address.
void read_storage(hid_t fid, hid_t d, hid_t dcpl, const std::string& file, const DatasetInfo& info,
                  StorageInfo& st) {
  if (const auto oinfo = h5::try_object_info(d, H5O_INFO_BASIC)) st.ohdr_addr = oinfo->addr;
  st.geo = read_geometry(fid);
  const haddr_t off = h5::try_dataset_offset(d);
  // Only where it is needed: for a chunked dataset libhdf5 walks the whole chunk index to
  // answer, and a damaged index (a B-tree looping on itself) overflows its stack. Our own
  // index reader (h5format) checks loops and bounds when the dataset is read.
  if (info.layout == "contiguous" || info.layout == "compact") st.storage_size = h5::try_storage_size(d);
  // Allocated is what libhdf5 reads by: a defined address (H5D__contig_is_space_alloc), not the
  // stored size (a damaged size of 0 with data at the address is EIO, ContiguousArray, not
  // fill). With a user block, 1.10 adds the base even to HADDR_UNDEF, which wraps to below the
  // base, where no dataset's bytes can be.
  if (info.layout == "contiguous")
    st.contiguous_addr = (off == HADDR_UNDEF || off < st.geo.base) ? fmt::kUndefAddr : off;
  st.external = info.layout == "contiguous" && h5::external_count(dcpl, file + ":" + info.path) > 0;
  // A metadata cache image holds object headers that were never written where the file says
  // they are: only libhdf5 (which loads the image) can find the dataset's layout.
  if (h5::try_has_mdc_image(fid)) {
    st.library_only = true;
    st.library_reason = "metadata cache image (object headers live in it)";
  }
  // Datasets reached through an external link in an intermediate group live in another file.
  const std::string fname = h5::try_file_name(d);
  if (!fname.empty() && fname != file && basename_of(fname) != basename_of(file)) {
    st.library_only = true;
    st.library_reason = "dataset lives in another file behind an external link";
  }
}

// Compact data lives in the layout message, which says how many bytes it holds. A dataspace
// larger than that (a damaged dims field) makes libhdf5 1.10 read past the message, into
// whatever memory follows it: no bytes to serve, every read is EIO (StorageInfo::damaged).
void check_compact_size(hid_t ftype, hid_t space, const DatasetInfo& info, StorageInfo& st) {
  if (info.layout != "compact" || !info.is_array) return;
  const std::string what = info.file + ":" + info.path;
  const hssize_t n = h5::extent_npoints(space, what);
  const size_t size = h5::type_size(ftype, what);
  const unsigned __int128 need = static_cast<unsigned __int128>(n) * size;
  if (need <= st.storage_size) return;
  st.damaged = "compact storage holds " + std::to_string(st.storage_size) + " bytes but the shape needs " +
               std::to_string(static_cast<uint64_t>(std::min<unsigned __int128>(need, UINT64_MAX))) +
               " (the dataspace or the layout message is damaged)";
}

void read_vds_mappings(hid_t dcpl, const std::string& file, const std::string& what, bool folded,
                       DatasetInfo& info, StorageInfo& st) {
  const size_t count = h5::virtual_count(dcpl, what);
  for (size_t i = 0; i < count; ++i) {
    VdsMapping m;
    m.file_name = h5::try_virtual_filename(dcpl, i);
    m.dataset_name = h5::try_virtual_dsetname(dcpl, i);
    try {
      h5::Handle vs = h5::virtual_vspace(dcpl, i);
      h5::Handle ss = h5::virtual_srcspace(dcpl, i);
      m.vspace = read_selection(vs.get());
      m.srcspace = read_selection(ss.get());
      const std::vector<hsize_t> sd = h5::extent_dims(ss.get(), "VDS source space");
      m.src_shape.assign(sd.begin(), sd.end());
    } catch (const Error& e) {
      st.library_only = true;
      st.library_reason = std::string("VDS mapping ") + std::to_string(i) + ": " + e.what();
    }
    if (m.file_name.find('%') != std::string::npos || m.dataset_name.find('%') != std::string::npos) {
      st.library_only = true;
      st.library_reason = "VDS with printf-style source names";
    } else {
      m.resolved_file = resolve_vds_source(file, m.file_name);
    }
    info.vds.push_back(std::move(m));
  }
  if (folded) {
    st.library_only = true;
    st.library_reason = "VDS of an array element type";
  }
}

// The one direct-or-library decision (make_dataset_array follows st.library_only).
void decide_read_path(DatasetInfo& info, StorageInfo& st) {
  std::string why;
  if (!info.is_array) {
    info.read_path = "none: " + info.why_not_array;
    return;
  }
  if (!st.damaged.empty()) {
    info.read_path = "none (every read EIO): " + st.damaged;
    return;
  }
  if (!st.library_only) {
    if (info.layout == "compact") {
      st.library_reason = "compact storage (bytes live in the object header)";
    } else if (st.external) {
      st.library_reason = "external raw storage";
    } else if (info.layout == "chunked" && !pipeline_supported(info.filters, &why)) {
      st.library_reason = why;
    } else if (info.layout != "contiguous" && info.layout != "chunked" && info.layout != "virtual") {
      st.library_reason = info.layout + " storage";
    }
    st.library_only = !st.library_reason.empty();
  }
  info.read_path = st.library_only ? "library: " + st.library_reason : "direct";
}

}  // namespace

std::shared_ptr<const DatasetInfo> LocalMetadata::dataset_info(H5File& f, const std::string& dset_path,
                                                               StorageInfo& st) {
  const std::string& file_path = f.path();
  const FileIdentity& file_id = f.identity();
  h5::Lock lk = h5::lock();
  hid_t fid = local_handle(f);
  auto info = std::make_shared<DatasetInfo>();
  info->file = file_path;
  info->path = dset_path;
  st.file_id = file_id;
  const std::string what = file_path + ":" + dset_path;

  const auto [target, objpath] = external_link_target(fid, file_path, dset_path);
  if (!target.empty()) {
    lk.unlock();
    auto other = f.files().open(target);
    auto inf = other->dataset_info(objpath);
    st = other->storage_info(objpath);
    return inf;
  }
  h5::Handle d = h5::try_open_dataset(fid, dset_path);
  if (!d) fail(ENOENT, what + ": not a dataset");
  h5::Handle ftype = h5::dataset_type(d.get(), what);
  h5::Handle space = h5::dataset_space(d.get(), what);
  Shape folded;
  if (!read_type_and_shape(d.get(), ftype.get(), space.get(), static_cast<uint64_t>(std::max<int64_t>(file_id.size, 0)),
                           *info, st, folded)) {
    // Not even the creation properties: libhdf5 converts the fill value into buffers of the
    // type's size when it copies them (H5Dget_create_plist).
    info->layout = "unknown";
    decide_read_path(*info, st);
    return info;
  }
  h5::Handle dcpl = h5::dataset_create_plist(d.get(), what);
  read_layout_and_filters(dcpl.get(), st.ds_rank, *info);
  read_fill_value(dcpl.get(), ftype.get(), *info);
  read_storage(fid, d.get(), dcpl.get(), file_path, *info, st);
  check_compact_size(ftype.get(), space.get(), *info, st);
  if (info->layout == "virtual") read_vds_mappings(dcpl.get(), file_path, what, !folded.empty(), *info, st);
  std::shared_ptr<const OpenFd> bytes;
  if (info->is_array && info->layout == "chunked" && (!st.library_only || info->convert_type)) bytes = file_bytes(f, fid);
  lk.unlock();

  // The chunk index type, from the layout message (one small read of the object header).
  if (info->is_array && info->layout == "chunked" && (!st.library_only || info->convert_type)) {
    try {
      auto layout = fmt::read_layout(*bytes, st.geo, st.ohdr_addr);
      info->chunk_index = fmt::index_type_name(layout.index_type);
    } catch (const std::exception& e) {
      info->chunk_index = "unknown";
      log::warn(what + ": cannot read the layout message: " + e.what());
    }
  }
  // Attribute values and the small value of a non-array are not read here: listing needs only
  // this; the sidecar reads them when it is opened (attributes(), read_value()).
  decide_read_path(*info, st);
  return info;
}

LocalMetadata::LocalMetadata(H5Files&) { h5::init_library(); }

std::vector<uint8_t> LocalMetadata::library_read(H5File& f, const std::string& dset,
                                                 const std::vector<uint64_t>& start,
                                                 const std::vector<uint64_t>& count) {
  return library_read_local(f, dset, start, count);
}

namespace meta = euxfel::meta;

bool LocalMetadata::exists(H5File& f, const std::string& path) { return meta::local::exists(f, path); }
bool LocalMetadata::is_dataset(H5File& f, const std::string& path) { return meta::local::is_dataset(f, path); }
bool LocalMetadata::is_group(H5File& f, const std::string& path) { return meta::local::is_group(f, path); }
std::string LocalMetadata::soft_link_target(H5File& f, const std::string& path) {
  return meta::local::soft_link_target(f, path);
}
bool LocalMetadata::try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) {
  return meta::local::try_read_u64(f, path, out, n);
}
bool LocalMetadata::try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) {
  return meta::local::try_read_i64(f, path, out, n);
}
std::vector<meta::IndexArrays> LocalMetadata::read_index(H5File& f, const std::string& base,
                                                         const std::vector<std::string>& groups, uint64_t n) {
  return meta::local::read_index(f, base, groups, n);
}
meta::SequenceMeta LocalMetadata::read_sequence_file(H5File& f, bool with_metadata, bool with_index) {
  // Composed of the questions above (sequence_file.cpp), each answered here.
  return meta::detail::read_sequence_file_parts(f, with_metadata, with_index);
}
std::vector<std::string> LocalMetadata::read_strings(H5File& f, const std::string& path) {
  return meta::local::read_strings(f, path);
}
std::vector<std::string> LocalMetadata::list_datasets(H5File& f, const std::string& group) {
  return meta::local::list_datasets(f, group);
}
std::vector<std::string> LocalMetadata::list_members(H5File& f, const std::string& group) {
  return meta::local::list_members(f, group);
}

}  // namespace h5d

// The local implementation of every H5Files without helper options in a program that links
// this library: registered before main. The helper-side library's link interface names this
// symbol as undefined (core/CMakeLists.txt), so its object file is always linked in.
extern "C" {
extern const int h5d_local_metadata_registered;
const int h5d_local_metadata_registered = [] {
  h5d::local_metadata_factory() = [](h5d::H5Files& f) -> std::unique_ptr<h5d::Metadata> {
    return std::make_unique<h5d::LocalMetadata>(f);
  };
  h5d::detail::local_write_file_factory() = &h5d::detail::make_local_write_file;  // the write path's
  return 1;
}();
}
