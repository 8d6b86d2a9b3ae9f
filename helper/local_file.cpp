// Side: helper. The libhdf5 side of one written file (WriteFile, writer.h), in process: in the
// file's writer process (an h5direct-helper, write_server.cpp) and in unit tests; never in the daemon,
// which reaches it through that process (remote_file.cpp). Every libhdf5 call of the write path
// is here, under the HDF5 lock.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/filters/filters.h"
#include "helper/h5lib.h"
#include "helper/h5types_api.h"
#include "core/log.h"
#include "core/write/write_internal.h"
#include "helper/serve.h"

namespace h5d {
namespace {

using detail::parse_typestr;
using detail::TypeStr;

// The HDF5 type of a checked typestr (as h5py writes them: bool as an int8 enum, complex as an
// {r, i} compound, bytes as a null-padded fixed string).
h5::Handle make_type(const TypeStr& ts) {
  const bool be = ts.big_endian;
  const size_t size = ts.size;
  auto copy = [](hid_t t) { return h5::copy_type(t); };
  switch (ts.kind) {
    case 'u':
    case 'i': {
      const bool u = ts.kind == 'u';
      switch (size) {
        case 1: return copy(u ? H5T_STD_U8LE : H5T_STD_I8LE);
        case 2: return copy(u ? (be ? H5T_STD_U16BE : H5T_STD_U16LE) : (be ? H5T_STD_I16BE : H5T_STD_I16LE));
        case 4: return copy(u ? (be ? H5T_STD_U32BE : H5T_STD_U32LE) : (be ? H5T_STD_I32BE : H5T_STD_I32LE));
        default: return copy(u ? (be ? H5T_STD_U64BE : H5T_STD_U64LE) : (be ? H5T_STD_I64BE : H5T_STD_I64LE));
      }
    }
    case 'f':
      if (size == 4) return copy(be ? H5T_IEEE_F32BE : H5T_IEEE_F32LE);
      return copy(be ? H5T_IEEE_F64BE : H5T_IEEE_F64LE);
    case 'c': {
      hid_t f = size == 8 ? (be ? H5T_IEEE_F32BE : H5T_IEEE_F32LE) : (be ? H5T_IEEE_F64BE : H5T_IEEE_F64LE);
      h5::Handle t = h5::create_type(H5T_COMPOUND, size);
      h5::insert_member(t.get(), "r", 0, f);
      h5::insert_member(t.get(), "i", size / 2, f);
      return t;
    }
    case 'b': {
      h5::Handle t = h5::enum_type(H5T_NATIVE_INT8);
      int8_t v = 0;
      h5::enum_insert(t.get(), "FALSE", &v);
      v = 1;
      h5::enum_insert(t.get(), "TRUE", &v);
      return t;
    }
    default: {  // 'S'
      h5::Handle t = copy(H5T_C_S1);
      h5::set_size(t.get(), size);
      h5::set_strpad(t.get(), H5T_STR_NULLPAD);
      return t;
    }
  }
}

std::vector<hsize_t> to_hsize(const std::vector<uint64_t>& v) { return {v.begin(), v.end()}; }

// Whether the link `p` exists: false when it, or a group on its way, is absent; Error(EIO) with
// libhdf5's reason when H5Lexists fails otherwise (a path through a dataset, a damaged file),
// never "absent". libhdf5 1.10 fails H5Lexists on a missing group on the way instead of
// answering false, so the links on the way are asked for one by one, outermost first.
bool link_exists(hid_t loc, const std::string& p, const std::string& what) {
  auto ask = [&](const std::string& link) { return h5::link_exists(loc, link, what); };
  bool any = false;
  for (size_t end = 0;;) {
    const size_t start = p.find_first_not_of('/', end);
    if (start == std::string::npos) break;
    end = std::min(p.find('/', start), p.size());
    if (!ask(p.substr(0, end))) return false;
    any = true;
  }
  return any || ask(p);  // "/" (or no name at all: libhdf5 says what it makes of that)
}

// In process, under the HDF5 lock: unit tests, and the writer process itself.
class LocalWriteFile final : public WriteFile {
 public:
  LocalWriteFile(std::string path, dev_t& dev, ino_t& ino) : path_(std::move(path)) {
    h5::init_library();  // once per process (the Writer's Engine did it already)
    auto lk = h5::lock();
    // No HDF5 file locking, as H5File opens files for reading (where both opens are in one
    // process they share one file in libhdf5, which refuses differing locking flags); other
    // processes may read the file meanwhile.
    h5::Handle fapl = h5::create_plist(H5P_FILE_ACCESS);
    h5::set_file_locking(fapl.get(), false, true);
    try {
      fid_ = h5::create_file(path_, H5F_ACC_EXCL, fapl.get(), "cannot create HDF5 file " + path_);
    } catch (const Error&) {
      struct stat st;
      if (::lstat(path_.c_str(), &st) == 0) fail(EEXIST, path_ + " exists");
      throw;
    }
    try {
      h5::flush(fid_.get(), path_ + ": H5Fflush");
    } catch (const Error& e) {  // the file is there; a later flush reports what is still wrong
      log::warn(std::string(e.what()));
    }
    struct stat created;
    if (::fstat(h5::vfd_descriptor(fid_.get(), path_), &created) != 0)
      fail(EIO, path_ + ": cannot see the file libhdf5 created");
    dev = created.st_dev;
    ino = created.st_ino;
  }
  ~LocalWriteFile() override {
    auto lk = h5::lock();
    dsets_.clear();
    fid_.reset();
  }

  const std::string& path() const { return path_; }
  pid_t pid() const override { return 0; }

  bool exists(const std::string& p) override {
    auto lk = h5::lock();
    return link_exists(file(), p, path_ + ":" + p);
  }

  void create_group(const std::string& p) override {
    auto lk = h5::lock();
    h5::Handle g = h5::create_group(file(), p, path_ + ":" + p);
    g.reset();
    flush();
  }

  uint64_t create_dataset(const std::string& p, const NewDataset& spec) override {
    const std::string what = path_ + ":" + p;
    DatasetPlan plan;
    try {
      plan = plan_dataset(spec);
    } catch (const Error& e) {
      fail(e.code(), what + ": " + e.what());
    }
    auto lk = h5::lock();
    h5::Handle type = make_type(parse_typestr(spec.typestr));
    const size_t rank = spec.shape.size();
    std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
    h5::Handle space = rank == 0 ? h5::create_scalar_space() : h5::create_simple_space(dims);
    h5::Handle dcpl = h5::create_plist(H5P_DATASET_CREATE);
    const bool chunked = !plan.chunks.empty();
    if (chunked) {
      std::vector<hsize_t> cd(plan.chunks.begin(), plan.chunks.end());
      h5::set_chunk(dcpl.get(), cd, what);
      for (const auto& f : plan.pipeline) {
        if (f.id == filters::kDeflate) {
          h5::set_deflate(dcpl.get(), f.cd_values.at(0));
        } else if (f.id == filters::kShuffle) {
          h5::set_shuffle(dcpl.get());
        } else {
          // Optional: libhdf5 then accepts the pipeline even when the plugin is not installed
          // here (chunks are compressed by the daemon and written directly; readers need it).
          h5::set_filter(dcpl.get(), static_cast<H5Z_filter_t>(f.id), H5Z_FLAG_OPTIONAL, f.cd_values,
                         what + ": H5Pset_filter " + filters::filter_name(f.id));
        }
      }
    } else {
      h5::set_layout(dcpl.get(), H5D_CONTIGUOUS);
      h5::set_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
      h5::set_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
    }
    h5::Handle did = h5::create_dataset(file(), p, type.get(), space.get(), dcpl.get(), what);
    uint64_t addr = 0;
    if (chunked) {
      dsets_[p] = std::move(did);
    } else if (plan.nbytes) {
      const haddr_t a = h5::try_dataset_offset(did.get());
      if (a == HADDR_UNDEF) fail(EIO, what + ": no file offset (H5Dget_offset)");
      addr = a;
    }
    did.reset();
    flush();
    return addr;
  }

  void write_chunk(const std::string& p, const std::vector<uint64_t>& offset,
                   const std::vector<uint8_t>& bytes) override {
    auto lk = h5::lock();
    const auto offs = to_hsize(offset);
    h5::write_chunk(dataset(p), offs, bytes.data(), bytes.size(), path_ + ":" + p);
  }

  std::vector<uint8_t> read_chunk(const std::string& p, const std::vector<uint64_t>& offset, uint64_t size,
                                  uint32_t& mask) override {
    auto lk = h5::lock();
    const auto offs = to_hsize(offset);
    const hid_t did = dataset(p);
    const hsize_t sz = h5::chunk_storage_size(did, offs, path_ + ":" + p);
    if (sz != size)
      fail(EIO, path_ + ":" + p + ": the chunk in the file has " + std::to_string(sz) + " bytes, " +
                    std::to_string(size) + " were written (the file was changed behind the writer)");
    std::vector<uint8_t> out(sz);
    mask = 0;
    h5::read_chunk(did, offs, mask, out.data(), path_ + ":" + p);
    return out;
  }

  void close_dataset(const std::string& p) override {
    auto lk = h5::lock();
    dsets_.erase(p);
  }

  void flush() override {
    auto lk = h5::lock();
    h5::flush(file(), path_ + ": H5Fflush");
  }

  void close() override {
    auto lk = h5::lock();
    if (!fid_) return;
    dsets_.clear();
    // Closed even when the last flush fails; that failure is then reported.
    std::string err;
    try {
      h5::flush(fid_.get(), path_ + ": H5Fflush");
    } catch (const Error& e) {
      err = e.what();
    }
    fid_.reset();
    if (!err.empty()) fail(EIO, err);
  }

 private:
  hid_t file() const {
    if (!fid_) fail(EIO, path_ + ": closed");
    return fid_.get();
  }
  hid_t dataset(const std::string& p) const {
    auto it = dsets_.find(p);
    if (it == dsets_.end()) fail(EIO, path_ + ":" + p + ": not a chunked dataset open for writing");
    return it->second.get();
  }

  std::string path_;
  h5::Handle fid_;
  std::map<std::string, h5::Handle> dsets_;  // chunked datasets, open for their chunks
};

}  // namespace

namespace detail {

std::unique_ptr<WriteFile> make_local_write_file(const std::string& path, dev_t& dev, ino_t& ino) {
  return std::make_unique<LocalWriteFile>(path, dev, ino);
}

const std::string* local_write_file_path(const WriteFile& file) {
  auto* local = dynamic_cast<const LocalWriteFile*>(&file);
  return local ? &local->path() : nullptr;
}

}  // namespace detail
}  // namespace h5d
