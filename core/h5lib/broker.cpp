// Side: daemon. The broker's policies (broker.h).
#include "core/h5lib/broker.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/fmt/chunk_index.h"
#include "core/h5lib/sandbox_plan.h"

namespace h5d {
namespace {

// The flags that make an open more than a read.
constexpr int kWriteFlags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND
#ifdef __O_TMPFILE
                            | __O_TMPFILE
#endif
    ;

std::string resolved(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// The path the descriptor's file has now (what a symlink led to).
std::string path_of(int fd, const std::string& fallback) {
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : resolved(fallback);
}

bool is_under(const std::string& path, const std::string& root) {
  if (root.empty() || path.compare(0, root.size(), root) != 0) return false;
  return path.size() == root.size() || path[root.size()] == '/' || root == "/";
}

BrokerAnswer refuse(int fd, int error, std::string why) {
  if (fd >= 0) ::close(fd);
  BrokerAnswer a;
  a.error = error;
  a.refusal = std::move(why);
  return a;
}

BrokerAnswer failed(int error) {
  BrokerAnswer a;
  a.error = error;
  return a;
}

bool permits(uid_t uid, const std::vector<gid_t>& gids, const struct stat& st, int want) {
  const bool in_group = std::find(gids.begin(), gids.end(), st.st_gid) != gids.end();
  const mode_t bits = st.st_uid == uid ? (st.st_mode >> 6) & 7 : in_group ? (st.st_mode >> 3) & 7 : st.st_mode & 7;
  return (static_cast<int>(bits) & want) == want;
}

}  // namespace

SourceBroker::SourceBroker(const std::vector<std::string>& roots) {
  for (const std::string& r : roots) roots_.push_back(resolved(r));
}

bool SourceBroker::under_root(const std::string& real) const {
  return std::any_of(roots_.begin(), roots_.end(), [&](const std::string& r) { return is_under(real, r); });
}

bool SourceBroker::should_log(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  if (refused_paths_.size() >= kMaxRefusedPaths) return false;
  return refused_paths_.insert(path).second;
}

std::vector<gid_t> SourceBroker::groups_of(uid_t uid, gid_t gid) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = groups_.find(uid);
    if (it != groups_.end()) return it->second;
  }
  // The user's groups as a login would have them (NSS: files, LDAP...); the file's own group
  // id stands for the primary group of a uid without an account.
  std::vector<gid_t> gids{gid};
  std::vector<char> buf(16384);
  struct passwd pw, *found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) {
    int n = 64;
    std::vector<gid_t> list(static_cast<size_t>(n));
    if (::getgrouplist(pw.pw_name, pw.pw_gid, list.data(), &n) < 0 && n > 64) {
      list.resize(static_cast<size_t>(n));
      ::getgrouplist(pw.pw_name, pw.pw_gid, list.data(), &n);
    }
    list.resize(static_cast<size_t>(std::max(n, 0)));
    gids = list;
    gids.push_back(pw.pw_gid);
  }
  std::lock_guard<std::mutex> lk(mu_);
  groups_[uid] = gids;
  return gids;
}

bool SourceBroker::owner_may(const std::string& file, const std::string& real, int want) {
  struct stat owner;
  if (::stat(file.c_str(), &owner) != 0) return false;
  // Root's files reach what anyone may (the mode's "other" bits): root may read everything, and
  // a helper that was compromised by another file and then serves root's would otherwise be
  // handed any HDF5 file of the machine.
  if (owner.st_uid == 0) return owner_may_as(kUnprivilegedUid, {}, real, want);
  return owner_may_as(owner.st_uid, groups_of(owner.st_uid, owner.st_gid), real, want);
}

bool SourceBroker::owner_may_as(uid_t uid, const std::vector<gid_t>& gids, const std::string& real, int want) {
  struct stat st;
  for (size_t i = real.find('/', 1); i != std::string::npos; i = real.find('/', i + 1)) {
    if (::stat(real.substr(0, i).c_str(), &st) != 0 || !permits(uid, gids, st, X_OK)) return false;
  }
  return !want || (::stat(real.c_str(), &st) == 0 && permits(uid, gids, st, want));
}

BrokerAnswer SourceBroker::stat(const std::string& path, bool follow, const std::vector<std::string>& files) {
  if (path.empty() || path[0] != '/') return refuse(-1, EACCES, "not an absolute path");
  looked_up_.fetch_add(1, std::memory_order_relaxed);
  BrokerAnswer a;
  // The files the daemon asked about: looked up as they are (the daemon reads them itself).
  if (std::find(files.begin(), files.end(), path) != files.end()) {
    if ((follow ? ::stat(path.c_str(), &a.st) : ::lstat(path.c_str(), &a.st)) != 0) return failed(errno);
    return a;
  }
  // Where the path leads (what is missing, or a final symlink not followed: below its directory's
  // resolved path), decided before the path is looked up: whether a path the policy refuses
  // exists is not told either.
  char buf[PATH_MAX];
  std::string real;
  if (follow && ::realpath(path.c_str(), buf)) {
    real = buf;
  } else {
    const auto slash = path.rfind('/');
    real = resolved(slash == 0 ? "/" : path.substr(0, slash)) + path.substr(slash);
  }
  if (!under_root(real) &&
      std::none_of(files.begin(), files.end(), [&](const std::string& f) { return owner_may(f, real, 0); })) {
    return refuse(-1, EACCES, "outside the mount's source, and the owner of the file asked about may not reach it");
  }
  if ((follow ? ::stat(path.c_str(), &a.st) : ::lstat(path.c_str(), &a.st)) != 0) return failed(errno);
  return a;
}

BrokerAnswer SourceBroker::open(const std::string& path, int flags, unsigned, const std::vector<std::string>& files) {
  if (flags & kWriteFlags) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return refuse(-1, EACCES, "opened for writing (a read helper writes nothing)");
  }
  if (path.empty() || path[0] != '/') {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return refuse(-1, EACCES, "not an absolute path");
  }
  // Never blocks on a FIFO or a device: those are refused below, unread.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return failed(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return failed(e);
  }
  if (!S_ISREG(st.st_mode)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return refuse(fd, EACCES, "not a regular file");
  }
  const std::string real = path_of(fd, path);
  if (!under_root(real)) {
    // Even a file the daemon named: the names of VDS sources and link targets come from helpers.
    if (fmt::hdf5_signature(fd, static_cast<uint64_t>(st.st_size)) != 1) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return refuse(fd, EACCES, "outside the mount's source and not an HDF5 file");
    }
    const bool named = std::find(files.begin(), files.end(), path) != files.end();
    const bool reachable =
        named || std::any_of(files.begin(), files.end(), [&](const std::string& f) { return owner_may(f, real, R_OK); });
    if (!reachable) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return refuse(fd, EACCES, "outside the mount's source, and the owner of the file asked about may not read it");
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  opened_.fetch_add(1, std::memory_order_relaxed);
  BrokerAnswer a;
  a.fd = fd;
  a.st = st;
  return a;
}

WriterBroker::~WriterBroker() {
  if (created_fd_ >= 0) ::close(created_fd_);
}

BrokerAnswer WriterBroker::stat(const std::string& path, bool follow, const std::vector<std::string>&) {
  if (path != path_) return refuse(-1, EACCES, "not this writer process's file (" + path_ + ")");
  BrokerAnswer a;
  if ((follow ? ::stat(path.c_str(), &a.st) : ::lstat(path.c_str(), &a.st)) != 0) return failed(errno);
  return a;
}

BrokerAnswer WriterBroker::open(const std::string& path, int flags, unsigned mode, const std::vector<std::string>&) {
  if (path != path_) return refuse(-1, EACCES, "not this writer process's file (" + path_ + ")");
  const bool create = flags & O_CREAT;
  if (create && (created_ || !(flags & O_EXCL))) return refuse(-1, EACCES, "created once, exclusively");
  if (!create && !created_) return refuse(-1, EACCES, "not created yet");
  const int access = flags & O_ACCMODE;
  const int fd = ::open(path.c_str(), (access == O_RDONLY ? O_RDONLY : O_RDWR) | (create ? O_CREAT | O_EXCL : 0) |
                                          O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                        static_cast<mode_t>(mode & 0666));
  if (fd < 0) return failed(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse(fd, EACCES, "not a regular file");
  BrokerAnswer a;
  a.fd = fd;
  a.st = st;
  if (create) {
    created_ = true;
    created_fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  } else if (st.st_dev != dev_ || st.st_ino != ino_) {
    return refuse(fd, EACCES, "no longer the file this writer process created");
  }
  return a;
}

}  // namespace h5d
