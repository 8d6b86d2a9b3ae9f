// Truncated files through libhdf5 (h5lib.h): a small read-only virtual file driver.
//
// libhdf5 refuses a file whose size is below the end of address space (EOA) stored in its
// superblock ("truncated file"), before reading anything else. A partially copied file or one
// whose writer crashed usually has its superblock, object headers and chunk indexes intact at
// the start, and only the last chunks missing. This driver reports the end of the file as
// max(real size, EOA), so the open succeeds, and FAILS every read that reaches past the real
// end (libhdf5 never sees invented bytes: what it would read there is an error, never zeros).
// Each such read is also recorded (take_reads_past_end), so that a caller can refuse a whole
// answer even where libhdf5 or our own code swallowed the failed read (a link left out as
// "dangling", an attribute skipped).
//
// The class struct differs between releases (1.13+ adds `version` and `value` in front, and
// vector/selection I/O, `del` and `ctl` callbacks): it is filled member by member, so only the
// callbacks every release has are set, and `version`/`value` only where the struct has them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/engine/fd_cache.h"
#include "core/error.h"
#include "core/fmt/chunk_index.h"
#include "helper/h5lib.h"
#if __has_include(<H5FDdevelop.h>)
#include <H5FDdevelop.h>  // 1.13+: H5FD_class_t and H5FD_t live here
#endif

namespace h5d::h5 {
namespace {

struct TruncFile {
  H5FD_t pub;  // first: libhdf5 sees only this part
  int fd;
  haddr_t eoa;
  haddr_t eof;  // the real size
  haddr_t claimed;  // the end the superblock stores
  dev_t dev;
  ino_t ino;
  char* path;
};
static_assert(std::is_standard_layout<TruncFile>::value, "TruncFile must start with H5FD_t");

std::mutex& past_end_mu() {
  static std::mutex mu;  // lock level 5 (docs/architecture.md), a leaf: guards past_end()
  return mu;
}
std::vector<ReadPastEnd>& past_end() {
  static std::vector<ReadPastEnd> v;
  return v;
}

void push_error(H5E_minor_t minor, const std::string& msg) {
  H5Epush2(H5E_DEFAULT, __FILE__, "h5direct truncated-file driver", __LINE__, H5E_ERR_CLS, H5E_VFL, minor, "%s",
           msg.c_str());
}

TruncFile* as(H5FD_t* f) { return reinterpret_cast<TruncFile*>(f); }
const TruncFile* as(const H5FD_t* f) { return reinterpret_cast<const TruncFile*>(f); }

// The superblock's end of address space (fmt::read_stored_end) of an open descriptor.
haddr_t stored_end(int fd, uint64_t size, const char* name) {
  class FdBytes final : public fmt::ByteSource {
   public:
    FdBytes(int fd, uint64_t size, const char* name) : fd_(fd), size_(size), name_(name) {}
    void read_at(uint64_t off, void* buf, size_t n) const override { pread_exact(fd_, buf, n, off, name_); }
    uint64_t size() const override { return size_; }
    std::string name() const override { return name_; }

   private:
    int fd_;
    uint64_t size_;
    std::string name_;
  };
  return static_cast<haddr_t>(fmt::read_stored_end(FdBytes(fd, size, name)));
}

H5FD_t* t_open(const char* name, unsigned flags, hid_t, haddr_t) {
  if (flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL)) {
    push_error(H5E_CANTOPENFILE, "read-only driver");
    return nullptr;
  }
  const int fd = ::open(name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    push_error(H5E_CANTOPENFILE, std::string(name) + ": " + std::strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    push_error(H5E_CANTOPENFILE, std::string(name) + ": fstat failed");
    return nullptr;
  }
  auto* f = new TruncFile{};
  f->fd = fd;
  f->eoa = 0;
  f->eof = static_cast<haddr_t>(st.st_size);
  f->claimed = stored_end(fd, static_cast<uint64_t>(st.st_size), name);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->path = ::strdup(name);
  return &f->pub;
}

herr_t t_close(H5FD_t* file) {
  TruncFile* f = as(file);
  ::close(f->fd);
  std::free(f->path);
  delete f;
  return 0;
}

int t_cmp(const H5FD_t* a, const H5FD_t* b) {
  const TruncFile *x = as(a), *y = as(b);
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

herr_t t_query(const H5FD_t*, unsigned long* flags) {
  // No metadata accumulator and no data sieve: every read libhdf5 makes reaches us as asked,
  // so a read is refused only when the bytes it needs lie past the cut.
  *flags = 0;
  return 0;
}

haddr_t t_get_eoa(const H5FD_t* file, H5FD_mem_t) { return as(file)->eoa; }

herr_t t_set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  as(file)->eoa = addr;
  return 0;
}

// What libhdf5 compares with the stored end of address space at open: never below it.
haddr_t t_get_eof(const H5FD_t* file, H5FD_mem_t) {
  const TruncFile* f = as(file);
  return std::max({f->eof, f->eoa, f->claimed});
}

herr_t t_get_handle(H5FD_t* file, hid_t, void** handle) {
  *handle = &as(file)->fd;
  return 0;
}

herr_t t_read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  TruncFile* f = as(file);
  if (addr > f->eof || size > f->eof - addr) {
    {
      std::lock_guard<std::mutex> lk(past_end_mu());
      past_end().push_back(ReadPastEnd{f->path, f->eof, f->claimed});
    }
    push_error(H5E_READERROR, std::string(f->path) + ": " + std::to_string(size) + " bytes at offset " +
                                  std::to_string(addr) + " lie past its end (" +
                                  fmt::truncated_message(f->eof, std::max(f->claimed, f->eoa)) + ")");
    return -1;
  }
  auto* p = static_cast<char*>(buf);
  while (size) {
    const ssize_t r = ::pread(f->fd, p, size, static_cast<off_t>(addr));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {  // an error, or the file shrank further since it was opened
      push_error(H5E_READERROR, std::string(f->path) + ": read at offset " + std::to_string(addr) + " failed" +
                                    (r < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (end of file)")));
      return -1;
    }
    p += r;
    addr += static_cast<haddr_t>(r);
    size -= static_cast<size_t>(r);
  }
  return 0;
}

herr_t t_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) {
  push_error(H5E_WRITEERROR, "read-only driver");
  return -1;
}

// `version` and `value` exist from 1.13 on (H5FD_CLASS_VERSION); set them only where they do.
template <class C, class = void>
struct HasValue : std::false_type {};
template <class C>
struct HasValue<C, std::void_t<decltype(std::declval<C&>().value)>> : std::true_type {};

template <class C>
void set_identity(C& c) {
  if constexpr (HasValue<C>::value) {
    // User drivers take values from 256 on (below is HDF5's own); any unused one does.
    c.value = static_cast<decltype(c.value)>(0x1d5);
  }
#ifdef H5FD_CLASS_VERSION
  c.version = H5FD_CLASS_VERSION;
#endif
}

H5FD_class_t make_class() {
  H5FD_class_t c;
  std::memset(&c, 0, sizeof c);
  set_identity(c);
  c.name = "h5direct_truncated";
  c.maxaddr = static_cast<haddr_t>((uint64_t(1) << 63) - 1);  // off_t
  c.fc_degree = H5F_CLOSE_WEAK;
  c.open = t_open;
  c.close = t_close;
  c.cmp = t_cmp;
  c.query = t_query;
  c.get_eoa = t_get_eoa;
  c.set_eoa = t_set_eoa;
  c.get_eof = t_get_eof;
  c.get_handle = t_get_handle;
  c.read = t_read;
  c.write = t_write;
  const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
  static_assert(sizeof map == sizeof c.fl_map, "free-list map size");
  std::memcpy(c.fl_map, map, sizeof map);
  return c;
}

// The driver's own calls into libhdf5 stay raw here (tools/check_h5_calls.py allows this file):
// H5FDregister registers it (a negative id is handled by open_truncated), and H5Epush2 in its
// callbacks IS how a driver reports a failure to libhdf5. What this file asks of the library
// otherwise goes through the wrappers (h5lib.h).
hid_t driver_id() {
  static const H5FD_class_t cls = make_class();
  static const hid_t id = H5FDregister(&cls);
  return id;
}

bool g_allowed = false;

}  // namespace

void allow_truncated_files(bool on) { g_allowed = on; }
bool truncated_files_allowed() { return g_allowed; }

Handle open_truncated(const std::string& path, uint64_t* real_size, uint64_t* eoa, std::string* why) {
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      if (why) *why = std::string("cannot open: ") + std::strerror(errno);
      return Handle();
    }
    if (real_size) *real_size = static_cast<uint64_t>(st.st_size);
    if (eoa) *eoa = stored_end(fd, static_cast<uint64_t>(st.st_size), path.c_str());
    ::close(fd);
  }
  Lock lk = lock();
  const hid_t drv = driver_id();
  if (drv < 0) {
    if (why) *why = "the truncated-file driver could not be registered";
    return Handle();
  }
  std::string reason;
  try {
    Handle fapl = create_plist(H5P_FILE_ACCESS);
    set_driver(fapl.get(), drv);
    Handle fid = try_open_file(path, fapl.get(), reason);
    if (!fid && why) *why = reason;
    return fid;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return Handle();
  }
}

size_t pending_reads_past_end() {
  std::lock_guard<std::mutex> lk(past_end_mu());
  return past_end().size();
}

void forget_reads_past_end(size_t keep) {
  std::lock_guard<std::mutex> lk(past_end_mu());
  if (past_end().size() > keep) past_end().resize(keep);
}

std::vector<ReadPastEnd> take_reads_past_end() {
  std::lock_guard<std::mutex> lk(past_end_mu());
  std::vector<ReadPastEnd> out;
  out.swap(past_end());
  return out;
}

}  // namespace h5d::h5
