// Side: daemon. The write path's daemon side (writer.h): the Writer, the files it writes into,
// and the dataset writers that turn pwrites into file bytes: contiguous datasets in place (here),
// chunked ones assembled chunk by chunk in memory and compressed on the pool (chunked_writer.cpp).
// libhdf5 is only ever reached through a WriteFile (write_file.cpp): in the daemon, a writer process.
#include "core/write/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/filters/encode.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"
#include "core/log.h"
#include "core/write/dataset_writers.h"
#include "core/write/write_internal.h"

namespace h5d {

namespace {

void pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(errno, what + ": pwrite at " + std::to_string(off) + ": " + std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

void pread_all(int fd, uint8_t* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(errno, what + ": pread at " + std::to_string(off) + ": " + std::strerror(errno));
    }
    if (r == 0) {  // beyond the end of a sparse file: never written
      std::memset(p, 0, n);
      return;
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

// shape x itemsize, saturating at UINT64_MAX (no wrap: a caller compares it with a limit).
uint64_t saturating_bytes(const Shape& shape, uint64_t itemsize) {
  uint64_t n = itemsize;
  for (uint64_t x : shape) {
    if (__builtin_mul_overflow(n, x, &n)) return UINT64_MAX;
  }
  return n;
}

// About 1 MiB chunks: inner dimensions kept whole as long as possible.
Shape auto_chunks(const Shape& shape, size_t itemsize) {
  Shape c = shape;
  for (auto& x : c) x = std::max<uint64_t>(x, 1);
  const uint64_t target = 1u << 20;
  for (size_t k = 0; k < c.size(); ++k) {
    while (saturating_bytes(c, itemsize) > target && c[k] > 1) c[k] = (c[k] + 1) / 2;
  }
  return c;
}

// ---- contiguous ---------------------------------------------------------------------------------

class ContiguousWriter final : public DatasetWriter {
 public:
  ContiguousWriter(std::shared_ptr<Writer::FileState> f, std::string what, uint64_t addr,
                   uint64_t size)
      : f_(std::move(f)), what_(std::move(what)), addr_(addr), size_(size) {}
  uint64_t nbytes() const override { return size_; }
  std::string describe() const override {
    return what_ + " (contiguous at file offset " + std::to_string(addr_) + ")";
  }
  void write(uint64_t off, const uint8_t* p, size_t n) override {
    if (off > size_ || n > size_ - off) fail(EFBIG, what_ + ": write past the end of the data");
    if (f_->closed) fail(EIO, what_ + ": the writer is closed");
    pwrite_all(f_->fd, p, n, addr_ + off, what_);
  }
  void read(uint64_t off, size_t n, uint8_t* out) override {
    if (off > size_ || n > size_ - off) fail(EINVAL, what_ + ": read past the end of the data");
    pread_all(f_->fd, out, n, addr_ + off, what_);
  }
  void flush(bool durable) override {
    if (durable && !f_->closed && ::fdatasync(f_->fd) != 0) {
      fail(errno, what_ + ": fdatasync: " + std::strerror(errno));
    }
  }

 private:
  std::shared_ptr<Writer::FileState> f_;
  std::string what_;
  uint64_t addr_, size_;
};

void ensure_size(int fd, uint64_t size, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail(errno, what + ": fstat: " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < size && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    fail(errno, what + ": ftruncate: " + std::strerror(errno));
  }
}

}  // namespace

namespace detail {

TypeStr parse_typestr(const std::string& ts) {
  auto bad = [&](const char* why) { fail(EINVAL, "unsupported dtype '" + ts + "'" + why); };
  if (ts.size() < 3 || ts.size() > 12) bad("");
  const char order = ts[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') bad("");
  for (size_t i = 2; i < ts.size(); ++i) {
    if (ts[i] < '0' || ts[i] > '9') bad("");
  }
  TypeStr t;
  t.kind = ts[1];
  t.big_endian = order == '>';
  t.size = std::stoull(ts.substr(2));  // at most 10 digits: no overflow
  const size_t n = t.size;
  switch (t.kind) {
    case 'u':
    case 'i':
      if (n != 1 && n != 2 && n != 4 && n != 8) bad("");
      break;
    case 'f':
      if (n != 4 && n != 8) bad(" (float32 and float64 only)");
      break;
    case 'c':
      if (n != 8 && n != 16) bad("");
      break;
    case 'b':
      if (n != 1) bad("");
      break;
    case 'S':
      // An HDF5 type size is a 32-bit field.
      if (n == 0 || n > 0xffffffffull) bad("");
      break;
    default:
      bad(" (integers, float32/64, bool, complex, bytes)");
  }
  return t;
}

}  // namespace detail

DatasetPlan plan_dataset(const NewDataset& spec) {
  const detail::TypeStr ts = detail::parse_typestr(spec.typestr);
  DatasetPlan p;
  p.itemsize = ts.size;
  const size_t rank = spec.shape.size();
  if (rank > 32) fail(EINVAL, "at most 32 dimensions (HDF5's limit)");
  // Byte offsets in files and in the .npy are signed 64-bit.
  p.nbytes = saturating_bytes(spec.shape, p.itemsize);
  if (p.nbytes > uint64_t(INT64_MAX)) fail(EFBIG, "the array would exceed 2^63 bytes");
  p.compression = spec.compression == "none" ? "" : spec.compression;
  bool chunked = !spec.chunks.empty() || !p.compression.empty();
  if (rank == 0 || p.nbytes == 0) chunked = false;  // scalars and empty arrays: contiguous
  if (!chunked) return p;
  if (!spec.chunks.empty()) {
    if (spec.chunks.size() != rank) fail(EINVAL, "chunks must have one entry per dimension");
    p.chunks = spec.chunks;
    for (size_t k = 0; k < rank; ++k) {
      if (p.chunks[k] == 0) fail(EINVAL, "chunk dimensions must be >= 1");
      p.chunks[k] = std::min(p.chunks[k], spec.shape[k]);
    }
  } else {
    p.chunks = auto_chunks(spec.shape, p.itemsize);
  }
  // HDF5 keeps a chunk's size in 32 bits.
  p.chunk_bytes = saturating_bytes(p.chunks, p.itemsize);
  if (p.chunk_bytes >= (4ull << 30)) fail(EINVAL, "chunks must be smaller than 4 GiB");
  p.pipeline = filters::write_pipeline(p.compression, spec.level, spec.shuffle, p.itemsize, p.chunk_bytes);
  return p;
}

bool WriteBudget::try_take(uint64_t n) {
  uint64_t cur = used_.load();
  do {
    if (n > limit_ || cur > limit_ - n) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n));
  return true;
}

Writer::Writer(H5Files& files, WriterOptions opts)
    : engine_(files.engine()),
      h5files_(files),
      make_write_file_(write_file_factory(files.helper_options())),
      opts_(std::move(opts)),
      budget_(std::make_shared<WriteBudget>(opts_.pending_budget)) {}

Writer::~Writer() {
  try {
    close_all();
  } catch (const std::exception& e) {
    log::error(std::string("closing written files: ") + e.what());
  }
}

void Writer::create_file(const std::string& path, const NewFileOwner* owner) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (files_.count(path)) fail(EEXIST, path + " exists");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) fail(EEXIST, path + " exists");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (closing_) fail(EIO, path + ": the writer is closed");
  }
  // Two creates of one path: H5Fcreate's O_EXCL lets one win, the other gets EEXIST.
  dev_t dev = 0;
  ino_t ino = 0;
  std::unique_ptr<WriteFile> h5 = make_write_file_(path, dev, ino);
  // The file libhdf5 created (O_EXCL), not whatever the path names by now: the directory may be
  // writable by others, who could put a symlink there meanwhile.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  struct stat mine;
  if (fd < 0 || ::fstat(fd, &mine) != 0 || mine.st_dev != dev || mine.st_ino != ino) {
    const int e = fd < 0 ? errno : EEXIST;
    if (fd >= 0) ::close(fd);
    try {
      h5->close();
    } catch (const std::exception&) {
    }
    fail(e, "cannot open " + path + " (the file created): " + std::strerror(e));
  }
  const pid_t pid = h5->pid();
  auto fs = std::make_shared<FileState>(path, std::move(h5), fd);
  if (owner) {
    // Belongs to the user who asked for it, with the mode asked for (the kernel applied the
    // user's umask): as root, the daemon gives it away; as another user it cannot, and the
    // mount shows the file's real owner (it follows the file, vfs/tree.h current_meta).
    if (::geteuid() == 0 && ::fchown(fs->fd, owner->uid, owner->gid) != 0) {
      log::warn(path + ": cannot give it to uid " + std::to_string(owner->uid) + ": " + std::strerror(errno));
    }
    if (::fchmod(fs->fd, owner->mode & 0666) != 0) {
      log::warn(path + ": cannot set its mode: " + std::string(std::strerror(errno)));
    }
  }
  log::info("created HDF5 file " + path + (pid > 0 ? " (HDF5 writer process pid " + std::to_string(pid) + ")" : ""));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!closing_) {
      files_[path] = fs;
      return;
    }
  }
  fs->close();  // close_all started meanwhile and did not see it
  fail(EIO, path + ": the writer is closed");
}

bool Writer::owns(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it != files_.end() && it->second->created && !it->second->closed;
}

pid_t Writer::writer_pid(const std::string& path) {
  std::shared_ptr<FileState> fs;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return 0;
    fs = it->second;
  }
  std::lock_guard<std::mutex> g(fs->mu);  // level 2: after mu_ (level 4) is let go
  return fs->h5 && !fs->closed ? fs->h5->pid() : 0;
}

std::shared_ptr<Writer::FileState> Writer::file_state(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  if (closing_ || (it != files_.end() && it->second->closed)) fail(EIO, path + ": closed");
  if (it == files_.end() || !it->second->created) {
    fail(EPERM, path + ": new groups and datasets only in files created through this mount");
  }
  return it->second;
}

void Writer::create_group(const std::string& file, const std::string& group_path) {
  auto fs = file_state(file);
  fs->with_file(file + ":" + group_path, [&](WriteFile& h5) {
    if (h5.exists(group_path)) fail(EEXIST, file + ":" + group_path + " exists");
    h5.create_group(group_path);
  });
}

DatasetWriterPtr Writer::create_dataset(const std::string& file, const std::string& path,
                                        const NewDataset& spec) {
  const std::string what = file + ":" + path;
  auto fs = file_state(file);
  DatasetPlan plan;
  try {
    plan = plan_dataset(spec);
  } catch (const Error& e) {
    fail(e.code(), what + ": " + e.what());
  }
  const bool chunked = !plan.chunks.empty();
  if (chunked) {
    if (plan.chunk_bytes > budget_->limit()) {
      const std::string msg = what + ": a chunk of " + std::to_string(plan.chunk_bytes) +
                              " bytes does not fit write_buffer=" + std::to_string(budget_->limit()) +
                              " (chunks written in part are held there): use smaller chunks or a larger write_buffer";
      log::error(msg);
      fail(EFBIG, msg);
    }
    if (plan.compression == "zstd") {
      // Readable where the zstd HDF5 plugin (filter 32015) is installed; Debian 12 ships none
      // (its h5py and hdf5plugin cannot read these files): say so once per mount.
      static std::once_flag warned;
      std::call_once(warned, [&] {
        log::warn(what + ": written with zstd (HDF5 filter 32015): other programs need the zstd HDF5 "
                  "filter plugin to read it (Debian 12's h5py and hdf5plugin have none; gzip, blosc and "
                  "lz4 are readable there)");
      });
    }
  }
  const uint64_t addr = fs->with_file(what, [&](WriteFile& h5) {
    if (h5.exists(path)) fail(EEXIST, what + " exists");
    return h5.create_dataset(path, spec);
  });
  DatasetWriterPtr w;
  if (chunked) {
    w = detail::make_chunked_writer(engine_, fs, what, path, spec.shape, plan.chunks, plan.itemsize, plan.pipeline,
                                    budget_);
  } else {
    // From the writer process: checked before bytes are written there (past the superblock,
    // the data's end within signed 64-bit file offsets).
    if (plan.nbytes && (addr == 0 || addr > uint64_t(INT64_MAX) - plan.nbytes))
      fail(EIO, what + ": implausible file offset " + std::to_string(addr) + " from the HDF5 writer process");
    // A killed daemon must leave a file whose end covers the dataset (else "truncated file").
    ensure_size(fs->fd, addr + plan.nbytes, what);
    w = std::make_shared<ContiguousWriter>(fs, what, addr, plan.nbytes);
  }
  log::info("created dataset " + w->describe());
  std::lock_guard<std::mutex> g(mu_);
  // close_all started meanwhile (its snapshot did not see this one): as any create after it.
  if (closing_) fail(EIO, what + ": the writer is closed");
  datasets_.push_back(w);
  return w;
}

DatasetWriterPtr Writer::open_existing(const std::string& file, const std::string& path) {
  const std::string what = file + ":" + path;
  if (!opts_.write_existing) fail(EPERM, what + ": existing datasets are read-only (mount with -o write_existing)");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = existing_.find(what); it != existing_.end()) return it->second;
  }
  auto h5f = h5files_.open(file);
  auto info = h5f->dataset_info(path);
  const StorageInfo st = h5f->storage_info(path);
  if (info->layout != "contiguous" || !info->filters.empty() || st.external || st.library_only ||
      st.contiguous_addr == fmt::kUndefAddr) {
    fail(EPERM, what + ": only allocated, uncompressed contiguous datasets can be written in place (" +
                    info->layout + ")");
  }
  const uint64_t nbytes = product(info->shape) * info->dtype.itemsize;
  std::lock_guard<std::mutex> g(mu_);
  if (closing_) fail(EIO, what + ": the writer is closed");
  if (auto it = existing_.find(what); it != existing_.end()) return it->second;
  std::shared_ptr<FileState> fs;
  if (auto it = files_.find(file); it != files_.end()) {
    fs = it->second;
  } else {
    const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail(errno, "cannot open " + file + " for writing: " + std::strerror(errno));
    fs = std::make_shared<FileState>(file, nullptr, fd);
    files_[file] = fs;
  }
  auto w = std::make_shared<ContiguousWriter>(fs, what, st.contiguous_addr, nbytes);
  existing_[what] = w;
  log::info("writing in place: " + w->describe());
  return w;
}

void Writer::snapshot(std::vector<DatasetWriterPtr>& ds, std::vector<std::shared_ptr<FileState>>& files) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& w : datasets_) {
    if (auto p = w.lock()) ds.push_back(p);
  }
  for (auto& [p, f] : files_) files.push_back(f);
}

void Writer::flush_all() {
  std::vector<DatasetWriterPtr> ds;
  std::vector<std::shared_ptr<FileState>> files;
  snapshot(ds, files);
  for (auto& w : ds) w->flush(false);
  // Every file, even when one fails (its writer process died): the first error is reported.
  std::exception_ptr first;
  for (auto& f : files) {
    try {
      {
        std::lock_guard<std::mutex> g(f->mu);
        if (f->closed) continue;
        if (f->h5) f->h5->flush();
      }
      if (f->fd >= 0) ::fdatasync(f->fd);
    } catch (const std::exception&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Writer::close_all() {
  std::vector<DatasetWriterPtr> ds;
  std::vector<std::shared_ptr<FileState>> files;
  std::string first_error;
  {
    // No new files, groups or datasets from here on: create_* check closing_ again when they
    // register what they made, so the snapshot below holds every dataset writer of these files.
    std::lock_guard<std::mutex> g(mu_);
    closing_ = true;
  }
  snapshot(ds, files);
  for (auto& w : ds) {
    try {
      if (!detail::close_if_chunked(*w)) w->flush(false);
    } catch (const std::exception& e) {
      if (!already_logged(e)) log::error(e.what());
      if (first_error.empty()) first_error = e.what();
    }
  }
  for (auto& f : files) {
    const std::string e = f->close();  // logged there
    if (!e.empty() && first_error.empty()) first_error = e;
  }
  if (!first_error.empty()) throw Error(EIO, first_error, true);  // each was logged above
}

}  // namespace h5d

