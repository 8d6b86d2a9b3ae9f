// Side: helper. Entering the sandbox (sandbox.h).
#include "helper/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "helper/channel.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define H5D_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define H5D_SANITIZED_BUILD 1
#endif
#endif

namespace h5d::helper {
namespace {

// ---- Limits ---------------------------------------------------------------------------------

void set_limit(int resource, rlim_t value) {
  struct rlimit now {};
  ::getrlimit(resource, &now);
  struct rlimit r {std::min(value, now.rlim_max), std::min(value, now.rlim_max)};
  if (::setrlimit(resource, &r) != 0) fail(errno, std::string("setrlimit: ") + std::strerror(errno));
}

void enter_limits(const SandboxLimits& lim) {
  set_limit(RLIMIT_CORE, 0);  // a helper's memory holds file contents: never written out
  set_limit(RLIMIT_NOFILE, lim.open_files);
#ifndef H5D_SANITIZED_BUILD
  // Sanitizers map terabytes of shadow memory: no data limit in their builds.
  set_limit(RLIMIT_DATA, lim.memory_bytes);
#endif
}

// ---- Privileges -----------------------------------------------------------------------------

void drop_uid() {
  // The bounding set first (that needs CAP_SETPCAP, gone with uid 0), then groups and ids; the
  // uid change clears the permitted and effective sets, and the parent-death signal with them.
  for (cap_value_t c = 0; c < static_cast<cap_value_t>(cap_max_bits()); ++c) {
    if (cap_drop_bound(c) != 0 && errno != EINVAL) fail(errno, "cannot drop capability bounding set");
  }
  const gid_t g = kUnprivilegedGid;
  const uid_t u = kUnprivilegedUid;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(g, g, g) != 0 || ::setresuid(u, u, u) != 0) {
    fail(errno, std::string("cannot leave uid 0: ") + std::strerror(errno));
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
}

void drop_caps() {
  cap_t none = cap_init();
  const int rc = none ? cap_set_proc(none) : -1;
  if (none) cap_free(none);
  if (rc != 0) fail(errno, std::string("cannot drop capabilities: ") + std::strerror(errno));
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

// ---- Landlock: no file system, no TCP, no signals or abstract sockets out ---------------------

// linux/landlock.h of Debian 12 stops at ABI 3: the later fields and rights are spelled here
// (their values are the kernel's ABI, which never changes).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};

void enter_landlock(int abi) {
#if defined(SYS_landlock_create_ruleset) && defined(SYS_landlock_restrict_self)
  RulesetAttr attr{};
  attr.handled_access_fs = (1ull << 13) - 1;          // ABI 1: execute, read, write, make, remove...
  if (abi >= 2) attr.handled_access_fs |= 1ull << 13;  // REFER
  if (abi >= 3) attr.handled_access_fs |= 1ull << 14;  // TRUNCATE
  if (abi >= 5) attr.handled_access_fs |= 1ull << 15;  // IOCTL_DEV
  if (abi >= 4) attr.handled_access_net = 3;           // BIND_TCP, CONNECT_TCP
  if (abi >= 6) attr.scoped = 3;                       // ABSTRACT_UNIX_SOCKET, SIGNAL
  const size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
  // No rule is added: every handled access is denied on every path. Descriptors the daemon
  // opened and passed over are not paths: they stay usable.
  const long fd = ::syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (fd < 0) fail(errno, std::string("landlock_create_ruleset: ") + std::strerror(errno));
  const long rc = ::syscall(SYS_landlock_restrict_self, fd, 0);
  const int e = errno;
  ::close(static_cast<int>(fd));
  if (rc != 0) fail(e, std::string("landlock_restrict_self: ") + std::strerror(e));
#else
  (void)abi;
  fail(ENOSYS, "landlock: not in this build's headers");
#endif
}

// ---- The system call filter -----------------------------------------------------------------

// A refused call that has no business in a parser: the process reports it to the daemon and dies.
void on_sigsys(int, siginfo_t* si, void*) {
  const uint32_t nr = static_cast<uint32_t>(si->si_syscall);
  char line[80] = "h5direct-helper: refused system call ";
  size_t n = std::strlen(line);
  char digits[12];
  size_t k = 0;
  uint32_t v = nr;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && k < sizeof digits);
  while (k) line[n++] = digits[--k];
  line[n++] = '\n';
  (void)!::write(2, line, n);
  if (Channel* c = channel()) c->send_refused_call(nr);
  ::signal(SIGSYS, SIG_DFL);
  ::raise(SIGSYS);  // blocked in this handler: delivered, and fatal, as it returns
}

class Filter {
 public:
  explicit Filter(bool log) : log_(log), default_(log ? SCMP_ACT_LOG : SCMP_ACT_ERRNO(EPERM)) {
    ctx_ = seccomp_init(default_);
    if (!ctx_) fail(ENOMEM, "seccomp_init failed");
    // Threads started before the filter (none of ours; code injected before main) get it too.
    seccomp_attr_set(ctx_, SCMP_FLTATR_CTL_TSYNC, 1);
  }
  ~Filter() { seccomp_release(ctx_); }
  Filter(const Filter&) = delete;
  Filter& operator=(const Filter&) = delete;

  void allow(std::initializer_list<const char*> names) {
    for (const char* n : names) add(SCMP_ACT_ALLOW, n, {});
  }
  void allow_if(const char* name, std::initializer_list<scmp_arg_cmp> args) { add(SCMP_ACT_ALLOW, name, args); }
  void allow_nr(int nr) {
    const int rc = seccomp_rule_add(ctx_, SCMP_ACT_ALLOW, nr, 0);
    if (rc != 0) fail(-rc, "seccomp rule for system call " + std::to_string(nr) + ": " + std::strerror(-rc));
  }
  // Refused with an errno: calls a library may try and live without (its fallbacks run).
  void refuse(int e, std::initializer_list<const char*> names) {
    for (const char* n : names) add(SCMP_ACT_ERRNO(static_cast<uint32_t>(e)), n, {});
  }
  void refuse_if(int e, const char* name, std::initializer_list<scmp_arg_cmp> args) {
    add(SCMP_ACT_ERRNO(static_cast<uint32_t>(e)), name, args);
  }
  // Calls a parser of files has no business making: the helper dies (on_sigsys).
  void kill(std::initializer_list<const char*> names) {
    for (const char* n : names) add(SCMP_ACT_TRAP, n, {});
  }
  void kill_if(const char* name, std::initializer_list<scmp_arg_cmp> args) { add(SCMP_ACT_TRAP, name, args); }
  void load() {
    const int rc = seccomp_load(ctx_);
    if (rc != 0) fail(-rc, std::string("seccomp_load: ") + std::strerror(-rc));
  }

 private:
  void add(uint32_t action, const char* name, std::initializer_list<scmp_arg_cmp> args) {
    // Log mode keeps the allowances only: everything else is allowed and logged by the kernel.
    if (log_ && action != SCMP_ACT_ALLOW) return;
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;  // not a call of this architecture
    const std::vector<scmp_arg_cmp> a(args);
    const int rc = seccomp_rule_add_array(ctx_, action, nr, static_cast<unsigned>(a.size()), a.data());
    if (rc != 0) fail(-rc, std::string("seccomp rule for ") + name + ": " + std::strerror(-rc));
  }
  bool log_;
  uint32_t default_;
  scmp_filter_ctx ctx_;
};

void enter_seccomp(Role role, bool log) {
  if (!log) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGSYS, &sa, nullptr) != 0) fail(errno, "cannot handle SIGSYS");
  }
  Filter f(log);
  const auto self = static_cast<scmp_datum_t>(::getpid());
  // What libhdf5, glibc's allocator and threads, the protocol and the log call.
  f.allow({"read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "close", "lseek", "fstat",
           "getcwd", "fstatfs", "statfs", "getdents64", "munmap", "mremap", "madvise", "brk", "mincore", "futex",
           "set_robust_list", "get_robust_list", "rseq", "set_tid_address", "clock_gettime", "clock_getres",
           "clock_nanosleep", "nanosleep", "gettimeofday", "time", "getrandom", "getpid", "gettid", "getppid",
           "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "rt_sigprocmask",
           "rt_sigaction", "rt_sigreturn", "sigaltstack", "exit", "exit_group", "sched_yield", "sched_getaffinity",
           "restart_syscall", "sendmsg", "recvmsg", "sendto", "recvfrom", "fcntl", "dup", "dup3", "getrusage",
           "times", "sysinfo", "uname", "flock", "fadvise64", "poll", "ppoll", "umask", "getrlimit"});
  // The descriptor cache's page cache check (cachestat, Linux 6.5: newer than libseccomp 2.5.4;
  // 451 on every architecture, the numbers of new calls being shared since Linux 5.1).
  f.allow_nr(451);
#ifdef H5D_SANITIZED_BUILD
  // UBSan's vptr check asks whether memory is readable by writing it into a pipe it makes
  // (sanitizer_common's IsAccessibleMemoryRange): refused, every virtual call in a thread
  // reports an invalid vptr. Sanitizer builds only.
  f.allow({"pipe", "pipe2"});
#endif
  if (role == Role::Writer) {
    f.allow({"pwrite64", "pwritev", "pwritev2", "ftruncate", "fallocate", "fsync", "fdatasync"});
  }
  // Memory: never executable (no code loaded or written once the helper serves).
  for (const char* n : {"mmap", "mprotect", "pkey_mprotect"}) {
    f.allow_if(n, {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)});
    f.kill_if(n, {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)});
  }
  // Threads, never processes; clone3's arguments cannot be inspected: glibc falls back to clone.
  f.allow_if("clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)});
  f.kill_if("clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)});
  f.refuse(ENOSYS, {"clone3"});
  // Signals to itself only (raise, abort, a thread of its own).
  for (const char* n : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"}) {
    f.allow_if(n, {SCMP_A0(SCMP_CMP_EQ, self)});
    f.kill_if(n, {SCMP_A0(SCMP_CMP_NE, self)});
  }
  f.kill({"tkill", "pidfd_send_signal", "pidfd_getfd"});
  for (int option : {PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS,
                     PR_CAPBSET_READ, PR_GET_PDEATHSIG, 0x53564d41 /* PR_SET_VMA: glibc names its mappings */}) {
    f.allow_if("prctl", {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(option))});
  }
  f.allow_if("ioctl", {SCMP_A1(SCMP_CMP_EQ, TCGETS)});  // isatty
  f.refuse_if(ENOTTY, "ioctl", {SCMP_A1(SCMP_CMP_NE, TCGETS)});
  // Its own limits: read any, set the CPU time of a request (limit_request_cpu).
  f.allow_if("prlimit64", {SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0)});
  f.allow_if("prlimit64", {SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A1(SCMP_CMP_EQ, RLIMIT_CPU)});
  f.allow_if("setrlimit", {SCMP_A0(SCMP_CMP_EQ, RLIMIT_CPU)});
  // Files come from the daemon (helper/libc_open.cpp): a path opened here is refused (reading)
  // or kills (writing, creating, truncating).
  for (const auto& [name, arg] : {std::pair<const char*, unsigned>{"open", 1}, {"openat", 2}}) {
    constexpr scmp_datum_t kWrite = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | __O_TMPFILE;
    f.refuse_if(EACCES, name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, kWrite, 0)});
    f.kill_if(name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, O_ACCMODE, O_WRONLY)});
    f.kill_if(name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, O_ACCMODE, O_RDWR)});
    f.kill_if(name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT)});
    f.kill_if(name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, O_TRUNC, O_TRUNC)});
    f.kill_if(name, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, __O_TMPFILE, __O_TMPFILE)});
  }
  f.refuse(ENOSYS, {"openat2"});
  // A descriptor's own status, never a path's (those are asked of the daemon too).
  f.allow_if("newfstatat", {SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH)});
  f.refuse_if(EACCES, "newfstatat", {SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, 0)});
  f.allow_if("statx", {SCMP_A2(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH)});
  f.refuse_if(EACCES, "statx", {SCMP_A2(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, 0)});
  f.refuse(EACCES, {"stat", "lstat", "access", "faccessat", "faccessat2", "readlink", "readlinkat"});
  f.refuse(EACCES, {"name_to_handle_at", "socket", "socketpair", "connect", "chdir", "fchdir", "memfd_create",
                    "io_uring_setup", "inotify_init", "inotify_init1", "fanotify_init", "pidfd_open", "seccomp",
                    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "setpriority"});
  f.kill({"execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
          "process_madvise", "open_by_handle_at", "creat", "bind", "listen", "accept", "accept4", "mount",
          "umount2", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "open_tree", "pivot_root",
          "chroot", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "unlink", "unlinkat",
          "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "mkdir",
          "mkdirat", "rmdir", "truncate", "utime", "utimes", "utimensat", "futimesat", "setxattr", "lsetxattr",
          "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setuid", "setgid", "setreuid",
          "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "capset", "setns",
          "unshare", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "init_module",
          "finit_module", "delete_module", "reboot", "kexec_load", "kexec_file_load", "swapon", "swapoff",
          "ioperm", "iopl", "personality", "quotactl", "acct", "settimeofday", "clock_settime", "clock_adjtime",
          "adjtimex", "userfaultfd", "syslog", "vhangup", "sethostname", "setdomainname"});
  f.load();
}

}  // namespace

SandboxPlan enter_sandbox(const SandboxPlan& plan, Role role, const SandboxLimits& limits) {
  SandboxPlan held = plan;
  if (plan.mode == SandboxMode::Off) return held;
  const bool strict = plan.mode == SandboxMode::Strict;
  auto layer = [&](bool wanted, bool& flag, const std::string& name, auto&& fn) {
    if (!wanted) return;
    try {
      fn();
    } catch (const Error& e) {
      if (strict) fail(EPERM, "sandbox: " + name + " cannot be set up (" + e.what() + "), and -o sandbox=strict");
      flag = false;
      held.missing.push_back(name + " (" + e.what() + ")");
    }
  };
  layer(plan.limits, held.limits, "limits", [&] { enter_limits(limits); });
  layer(plan.drop_uid, held.drop_uid, "unprivileged uid", [&] { drop_uid(); });
  layer(plan.drop_caps, held.drop_caps, "capabilities", [&] { drop_caps(); });
  layer(plan.no_new_privs, held.no_new_privs, "no_new_privs", [&] {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(errno, std::strerror(errno));
  });
  layer(plan.not_dumpable, held.not_dumpable, "not dumpable", [&] {
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(errno, std::strerror(errno));
  });
  bool landlock = plan.landlock_abi > 0;
  layer(landlock, landlock, "landlock", [&] { enter_landlock(plan.landlock_abi); });
  if (!landlock) held.landlock_abi = 0;
  // Without no_new_privs (or CAP_SYS_ADMIN) the kernel refuses a filter: it was asked for above.
  layer(plan.seccomp, held.seccomp, "seccomp", [&] { enter_seccomp(role, plan.seccomp_log); });
  return held;
}

void limit_request_cpu(unsigned seconds) {
  struct rusage ru {};
  struct rlimit now {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0 || ::getrlimit(RLIMIT_CPU, &now) != 0) return;
  const rlim_t used = static_cast<rlim_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1;
  struct rlimit r {std::min<rlim_t>(used + seconds, now.rlim_max), now.rlim_max};
  ::setrlimit(RLIMIT_CPU, &r);
}

}  // namespace h5d::helper
