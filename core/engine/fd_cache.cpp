#include "core/engine/fd_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>
#include <cstring>

#include "core/error.h"

namespace h5d {

FileIdentity identity_of(const struct ::stat& st) {
  FileIdentity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

void pread_exact(int fd, void* buf, size_t n, uint64_t off, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(EIO, what + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(off) +
                    " failed: " + std::strerror(errno));
    }
    if (r == 0)
      fail_data(what + ": file is truncated: " + std::to_string(n) + " bytes at offset " +
                std::to_string(off) + " lie beyond its end");
    done += static_cast<size_t>(r);
  }
}

OpenFd::~OpenFd() { ::close(fd_); }

FileIdentity current_identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    fail(e == ENOENT ? ENOENT : (e == EACCES ? EACCES : EIO), path + ": cannot stat: " + std::strerror(e));
  }
  return identity_of(st);
}

namespace {

[[noreturn]] void fail_changed(const std::string& path, const std::string& how) {
  fail(ESTALE, path + ": the file " + how + " since its metadata was read; reopen to read the new contents");
}

FileIdentity identity_expected(const std::string& path, const FileIdentity& expect) {
  FileIdentity now;
  try {
    now = current_identity(path);
  } catch (const Error& e) {
    if (e.code() == ENOENT) fail_changed(path, "was deleted");
    throw;
  }
  if (now != expect) {
    fail_changed(path, now.ino != expect.ino || now.dev != expect.dev ? "was replaced"
                       : now.size != expect.size                       ? "changed size"
                                                                      : "was modified");
  }
  return now;
}

std::string hold_key(const std::string& path, const FileIdentity& id) {
  return path + '\0' + std::to_string(id.dev) + ':' + std::to_string(id.ino) + ':' + std::to_string(id.size) + ':' +
         std::to_string(id.mtime_ns);
}

}  // namespace

// The files held for open readers: (path, identity) -> descriptor and how many handles hold it.
// Shared with the handles, which may outlive the cache.
struct FdCache::Holds {
  struct Entry {
    std::shared_ptr<const OpenFd> fd;
    unsigned holders = 0;
  };
  mutable std::mutex mu;  // lock level 5 (docs/architecture.md), a leaf; never taken with FdCache::mu_
  std::unordered_map<std::string, Entry> map;
  std::atomic<size_t> count{0};

  void release(const std::string& key) {
    std::shared_ptr<const OpenFd> last;  // closed outside the lock
    std::lock_guard<std::mutex> lk(mu);
    auto it = map.find(key);
    if (it == map.end() || --it->second.holders > 0) return;
    last = std::move(it->second.fd);
    map.erase(it);
    count.fetch_sub(1, std::memory_order_relaxed);
  }
};

void FdCache::verify(const std::string& path, const FileIdentity& expect) { identity_expected(path, expect); }

void FdCache::recheck(const std::string& path, const FileIdentity& expect) const {
  try {
    identity_expected(path, expect);
  } catch (const Error& e) {
    if (e.code() != ESTALE || !held(path, expect)) throw;
  }
}

FdCache::FdCache(unsigned max_open) : max_open_(max_open ? max_open : 1), holds_(std::make_shared<Holds>()) {}

size_t FdCache::hold_limit() const { return max_open_ - std::max(1u, max_open_ / 8); }
size_t FdCache::held_count() const { return holds_->count.load(std::memory_order_relaxed); }

size_t FdCache::cache_capacity() const {
  const size_t held = held_count();
  return std::max<size_t>(max_open_ > held ? max_open_ - held : 0, std::max(1u, max_open_ / 8));
}

// The held descriptor of `path` as `expect`, when it is still that file (fstat: a file deleted
// or renamed away keeps its identity; one modified in place does not).
std::shared_ptr<const OpenFd> FdCache::held(const std::string& path, const FileIdentity& expect) const {
  std::shared_ptr<const OpenFd> fd;
  {
    std::lock_guard<std::mutex> lk(holds_->mu);
    auto it = holds_->map.find(hold_key(path, expect));
    if (it == holds_->map.end()) return nullptr;
    fd = it->second.fd;
  }
  struct stat st;
  if (::fstat(fd->fd(), &st) != 0 || identity_of(st) != expect) return nullptr;
  return fd;
}

std::shared_ptr<const void> FdCache::hold(const std::string& path, const FileIdentity& expect, bool* bound) {
  if (bound) *bound = false;
  const std::string key = hold_key(path, expect);
  std::shared_ptr<Holds> holds = holds_;
  auto handle = [&holds, &key](const std::shared_ptr<const OpenFd>& fd) {
    return std::shared_ptr<const void>(fd.get(), [holds, key](const void*) { holds->release(key); });
  };
  {
    std::lock_guard<std::mutex> lk(holds->mu);
    auto it = holds->map.find(key);
    if (it != holds->map.end()) {
      ++it->second.holders;
      return handle(it->second.fd);
    }
    if (holds->map.size() >= hold_limit()) {
      if (bound) *bound = true;
      return nullptr;
    }
  }
  // Only a file still there as `expect` is taken hold of (a reader opening a file already
  // deleted gets nothing of it): the cached descriptor when it is that file, else the file
  // opened now.
  struct stat now;
  if (::stat(path.c_str(), &now) != 0 || identity_of(now) != expect) return nullptr;
  std::shared_ptr<const OpenFd> fd;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(path);
    if (it != map_.end() && it->second->second->identity() == expect) fd = it->second->second;
  }
  if (!fd) {
    const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f < 0) return nullptr;
    struct stat st;
    if (::fstat(f, &st) != 0 || identity_of(st) != expect) {
      ::close(f);
      return nullptr;
    }
    fd = std::make_shared<const OpenFd>(f, path, identity_of(st));
  }
  std::lock_guard<std::mutex> lk(holds->mu);
  auto [it, fresh] = holds->map.try_emplace(key);
  if (fresh) {
    if (holds->map.size() > hold_limit()) {
      holds->map.erase(it);
      if (bound) *bound = true;
      return nullptr;
    }
    it->second.fd = std::move(fd);
    holds->count.fetch_add(1, std::memory_order_relaxed);
  }
  ++it->second.holders;
  return handle(it->second.fd);
}

std::shared_ptr<const OpenFd> FdCache::get(const std::string& path, const FileIdentity* expect) {
  FileIdentity now;
  try {
    now = expect ? identity_expected(path, *expect) : current_identity(path);
  } catch (const Error& e) {
    if (expect && e.code() == ESTALE) {
      if (auto fd = held(path, *expect)) return fd;  // deleted or replaced, held for a reader
    }
    throw;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(path);
    if (it != map_.end()) {
      if (it->second->second->identity() == now) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
      lru_.erase(it->second);  // the file was replaced or modified: reopen (readers keep theirs)
      map_.erase(it);
    }
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fail(e == ENOENT ? ENOENT : (e == EACCES ? EACCES : EIO), path + ": cannot open: " + std::strerror(e));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(EIO, path + ": cannot stat: " + std::strerror(e));
  }
  auto entry = std::make_shared<const OpenFd>(fd, path, identity_of(st));
  if (expect && entry->identity() != *expect) fail_changed(path, "changed");
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(path);
  if (it != map_.end() && it->second->second->identity() == entry->identity()) {  // opened meanwhile
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  if (it != map_.end()) {
    lru_.erase(it->second);
    map_.erase(it);
  }
  lru_.emplace_front(path, entry);
  map_[path] = lru_.begin();
  const size_t capacity = cache_capacity();
  while (lru_.size() > capacity) {
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return entry;
}

size_t FdCache::open_count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

}  // namespace h5d

namespace h5d {

namespace {
// cachestat(2) (Linux 6.5): not in Debian 12's headers yet, so declared here as the kernel's
// uapi (include/uapi/linux/mman.h) defines it; 451 in the common syscall table.
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct CachestatRange {
  uint64_t off, len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
std::atomic<bool> no_cachestat{false};

bool resident_by_mincore(int fd, uint64_t off, uint64_t n) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = off / page * page, hi = (off + n + page - 1) / page * page;
  void* p = ::mmap(nullptr, hi - lo, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(lo));
  if (p == MAP_FAILED) return false;
  std::vector<unsigned char> vec((hi - lo) / page);
  const bool ok = ::mincore(p, hi - lo, vec.data()) == 0;
  ::munmap(p, hi - lo);
  if (!ok) return false;
  for (unsigned char v : vec)
    if (!(v & 1)) return false;
  return true;
}
}  // namespace

bool source_resident(int fd, uint64_t off, uint64_t n) {
  if (n == 0) return true;
  if (!no_cachestat.load(std::memory_order_relaxed)) {
    static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t lo = off / page * page, hi = (off + n + page - 1) / page * page;
    CachestatRange r{lo, hi - lo};
    Cachestat cs{};
    if (::syscall(__NR_cachestat, fd, &r, &cs, 0) == 0) return cs.nr_cache >= (hi - lo) / page;
    if (errno == ENOSYS || errno == EPERM) no_cachestat.store(true, std::memory_order_relaxed);
    else return false;  // EOPNOTSUPP (hugetlbfs...), EBADF: cannot tell
  }
  return resident_by_mincore(fd, off, n);
}

}  // namespace h5d
