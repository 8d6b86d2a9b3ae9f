// Side: helper. The helper program's own open() and stat(): once the sandbox is entered
// (helper/sandbox.h), every file libhdf5 or the helper's own code opens is asked of the daemon
// (the broker, core/h5lib/broker.h), which opens it after its own checks and hands the descriptor
// over, and so is the status of every path (stat, lstat, access). The sandbox leaves the helper
// no file system of its own (Landlock grants no path; the system call filter refuses opens and
// lookups by path), so this is the only way a file reaches it.
//
// Linked into h5direct-helper alone (helper/CMakeLists.txt), never into the library the tests
// link: symbols of the executable come first when the dynamic linker resolves libhdf5's calls of
// open() (its sec2 driver, external files, external links) and the program's own (FdCache, the
// cut-file driver), as Chromium's renderers interpose what their sandbox takes away. glibc's
// internal opens (fopen's, opendir's, the loader's) do not come here; they meet the sandbox and
// fail, which nothing of the helper needs once it serves (docs/architecture.md, "The sandbox").
// Before the sandbox, open() is the system call itself.
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <string>

#include "helper/channel.h"

namespace {

using h5d::helper::channel;

bool brokered() { return h5d::helper::opens_brokered() && channel(); }

// `path` as an absolute path the daemon can look up; false (errno set) when it has none.
bool absolute(int dirfd, const char* path, std::string& out) {
  if (!path) {
    errno = EFAULT;
    return false;
  }
  out = path;
  if (!out.empty() && out[0] == '/') return true;
  char cwd[PATH_MAX];
  if (dirfd != AT_FDCWD || out.empty() || !::getcwd(cwd, sizeof cwd)) {  // relative to a directory it cannot have
    errno = EACCES;
    return false;
  }
  out = std::string(cwd) + "/" + out;
  return true;
}

int open_at(int dirfd, const char* path, int flags, mode_t mode) {
  if (!brokered()) return static_cast<int>(::syscall(SYS_openat, dirfd, path, flags | O_LARGEFILE, mode));
  std::string p;
  if (!absolute(dirfd, path, p)) return -1;
  // Close-on-exec whatever the caller asked for: the helper never execs.
  return channel()->open(p, flags, static_cast<unsigned>(mode));
}

int stat_syscall(int dirfd, const char* path, struct stat* st, int flags) {
#ifdef SYS_newfstatat
  return static_cast<int>(::syscall(SYS_newfstatat, dirfd, path, st, flags));
#else
  return static_cast<int>(::syscall(SYS_fstatat64, dirfd, path, st, flags));
#endif
}

// A descriptor's own status is no lookup: the system call, as always; where the kernel refuses it
// to the helper's uid (a FUSE source mounted without allow_other admits its mounter only), the
// status the daemon saw when it opened the file for the helper.
int fstat_of(int fd, struct stat* st) {
  const int rc = stat_syscall(fd, "", st, AT_EMPTY_PATH);
  if (rc == 0 || !brokered() || (errno != EACCES && errno != EPERM)) return rc;
  const int e = errno;
  if (channel()->opened_status(fd, st)) return 0;
  errno = e;
  return rc;
}

int stat_at(int dirfd, const char* path, struct stat* st, int flags) {
  if (flags & AT_EMPTY_PATH && path && !*path) return fstat_of(dirfd, st);
  if (!brokered()) return stat_syscall(dirfd, path, st, flags);
  std::string p;
  if (!absolute(dirfd, path, p)) return -1;
  return channel()->stat(p, !(flags & AT_SYMLINK_NOFOLLOW), st);
}

int access_at(int dirfd, const char* path, int mode, int flags) {
  if (!brokered()) return static_cast<int>(::syscall(SYS_faccessat2, dirfd, path, mode, flags));
  // Whether it exists where the daemon would open it: what the helper may do with it is the
  // daemon's to decide when it asks for the file.
  struct stat st;
  return stat_at(dirfd, path, &st, flags & AT_SYMLINK_NOFOLLOW);
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | __O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, unsigned)) : 0;
}

}  // namespace

extern "C" {

// Declared by <sys/stat.h> of glibc before 2.33 only.
int __xstat(int ver, const char* path, struct stat* st);
int __fxstat(int ver, int fd, struct stat* st);
int __fxstat64(int ver, int fd, struct stat64* st);
int __lxstat(int ver, const char* path, struct stat* st);
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags);
int __xstat64(int ver, const char* path, struct stat64* st);
int __lxstat64(int ver, const char* path, struct stat64* st);
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags);
// Declared by <fcntl.h> only in _FORTIFY_SOURCE builds.
int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_at(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_at(dirfd, path, flags, mode);
}

// The same calls under their other names (64-bit offsets are the default here), and what
// _FORTIFY_SOURCE builds call for an open() without a constant mode.
int open64(const char* path, int flags, ...) __attribute__((alias("open")));
int openat64(int dirfd, const char* path, int flags, ...) __attribute__((alias("openat")));
int __open_2(const char* path, int flags) { return open_at(AT_FDCWD, path, flags, 0); }
int __open64_2(const char* path, int flags) __attribute__((alias("__open_2")));
int __openat_2(int dirfd, const char* path, int flags) { return open_at(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char* path, int flags) __attribute__((alias("__openat_2")));
int creat(const char* path, mode_t mode) { return open_at(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char* path, mode_t mode) __attribute__((alias("creat")));

int stat(const char* path, struct stat* st) { return stat_at(AT_FDCWD, path, st, 0); }
int fstat(int fd, struct stat* st) { return fstat_of(fd, st); }
int fstat64(int fd, struct stat64* st) { return fstat_of(fd, reinterpret_cast<struct stat*>(st)); }
int __fxstat(int, int fd, struct stat* st) { return fstat_of(fd, st); }
int __fxstat64(int, int fd, struct stat64* st) { return fstat_of(fd, reinterpret_cast<struct stat*>(st)); }
int lstat(const char* path, struct stat* st) { return stat_at(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW); }
int fstatat(int dirfd, const char* path, struct stat* st, int flags) { return stat_at(dirfd, path, st, flags); }
// struct stat64 is struct stat where offsets are 64 bits (every 64-bit ABI).
static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 is stat here");
int stat64(const char* path, struct stat64* st) { return stat_at(AT_FDCWD, path, reinterpret_cast<struct stat*>(st), 0); }
int lstat64(const char* path, struct stat64* st) {
  return stat_at(AT_FDCWD, path, reinterpret_cast<struct stat*>(st), AT_SYMLINK_NOFOLLOW);
}
int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  return stat_at(dirfd, path, reinterpret_cast<struct stat*>(st), flags);
}
// glibc before 2.33 had stat() call these (a program built there names them).
int __xstat(int, const char* path, struct stat* st) { return stat_at(AT_FDCWD, path, st, 0); }
int __lxstat(int, const char* path, struct stat* st) { return stat_at(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW); }
int __fxstatat(int, int dirfd, const char* path, struct stat* st, int flags) { return stat_at(dirfd, path, st, flags); }
int __xstat64(int ver, const char* path, struct stat64* st) { return stat64(path, st); }
int __lxstat64(int ver, const char* path, struct stat64* st) { return lstat64(path, st); }
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  return fstatat64(dirfd, path, st, flags);
}
int access(const char* path, int mode) { return access_at(AT_FDCWD, path, mode, 0); }
int faccessat(int dirfd, const char* path, int mode, int flags) { return access_at(dirfd, path, mode, flags); }

}  // extern "C"
