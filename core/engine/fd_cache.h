// Plain read-only file descriptors for the data path, cached with a bound on how many stay open.
// A descriptor in use is never closed under its reader: evicted entries close when the last
// user lets go. Each entry remembers the file's identity (device, inode, size, mtime) at open.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/fmt/byte_source.h"

namespace h5d {

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

// Reads exactly n bytes at off; a short read (truncated file) or an I/O error throws
// Error(EIO) naming `what` and the range.
void pread_exact(int fd, void* buf, size_t n, uint64_t off, const std::string& what);

class OpenFd final : public fmt::ByteSource {
 public:
  OpenFd(int fd, std::string path, FileIdentity id) : fd_(fd), path_(std::move(path)), id_(id) {}
  ~OpenFd() override;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const FileIdentity& identity() const { return id_; }
  void read_at(uint64_t off, void* buf, size_t n) const override { pread_exact(fd_, buf, n, off, path_); }
  uint64_t size() const override { return static_cast<uint64_t>(id_.size); }
  std::string name() const override { return path_; }

 private:
  int fd_;
  std::string path_;
  FileIdentity id_;
};

// The identity of the file now at `path`. Throws Error(ENOENT/EACCES/EIO).
FileIdentity current_identity(const std::string& path);

class FdCache {
 public:
  explicit FdCache(unsigned max_open);
  // Returns an open descriptor for the file now at path (one stat per call: a cached descriptor
  // whose file was replaced is reopened). With `expect` (the identity the caller's metadata was
  // read from), a file that changed or went away since throws Error(ESTALE), unless it is held
  // (hold) as `expect` and unchanged through its descriptor: then that descriptor. Else
  // Error(errno).
  std::shared_ptr<const OpenFd> get(const std::string& path, const FileIdentity* expect = nullptr);
  // Error(ESTALE) when the file at path is no longer `expect` (the descriptor of a held one:
  // still unchanged). Called after reading bytes, so that bytes read while the file was being
  // rewritten are never served.
  void recheck(const std::string& path, const FileIdentity& expect) const;
  // The same check by name alone, for a process that holds nothing (the HDF5 helpers).
  static void verify(const std::string& path, const FileIdentity& expect);
  size_t open_count() const;

  // Holds the file at `path` open as `expect` (the identity the metadata of an open reader's
  // array was read from) for as long as the returned handle lives: deleted or replaced by
  // another file meanwhile, it keeps being read through this descriptor (get, recheck), as an
  // open file keeps its bytes after an unlink; modified in place, it fails with ESTALE as
  // before. Null when the file at `path` is no longer `expect`, or when held files would pass
  // the bound (`*bound` is then set): at most max_open - max(1, max_open / 8) distinct files are
  // held at once, the rest of max_open is kept for the files being read (the cache shrinks by
  // what is held).
  std::shared_ptr<const void> hold(const std::string& path, const FileIdentity& expect, bool* bound = nullptr);
  size_t held_count() const;
  size_t hold_limit() const;

 private:
  struct Holds;
  std::shared_ptr<const OpenFd> held(const std::string& path, const FileIdentity& expect) const;
  size_t cache_capacity() const;

  unsigned max_open_;
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards lru_, map_
  std::list<std::pair<std::string, std::shared_ptr<const OpenFd>>> lru_;  // front = most recent
  std::unordered_map<std::string, decltype(lru_)::iterator> map_;
  std::shared_ptr<Holds> holds_;  // shared with the handles hold() gives out
};

FileIdentity identity_of(const struct ::stat& st);

// Whether bytes [off, off + n) of the file open as `fd` are all in the page cache (cachestat(2)
// where the kernel has it, 6.5 and later; else mincore(2) of a mapping of the range). False
// when it cannot tell: the caller then reads, which is always correct.
bool source_resident(int fd, uint64_t off, uint64_t n);

}  // namespace h5d
