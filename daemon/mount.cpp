#include "daemon/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/options.h"
#include "core/engine/engine.h"
#include "core/h5lib/h5helper.h"
#include "core/h5lib/h5files.h"
#include "core/h5lib/metadata.h"
#include "core/h5lib/sandbox_plan.h"
#include "daemon/privileges.h"
#include "core/error.h"
#include "core/log.h"
#include "core/write/writer.h"
#include "fusefs/adapter.h"
#include "vfs/providers.h"
#include "vfs/tree.h"
#include "vfs/vfs.h"

#ifndef H5D_VERSION
#define H5D_VERSION "unknown"
#endif

namespace h5d::daemon {
namespace {

std::string g_program = "h5direct";  // as invoked (program_name), set once by run_mount

int die(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", g_program.c_str(), msg.c_str());
  return 1;
}

std::string escape_opt(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

struct MountEntry {
  std::string majmin, point, type, source;
};

// mountinfo's octal escapes (\040 for a space, ...) decoded.
std::string unescape_mountinfo(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The mounts of this process's namespace, from /proc/self/mountinfo (stat() on a mount point
// would send a request to ourselves, or hang on a dead mount), oldest first.
std::vector<MountEntry> mounts() {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<MountEntry> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string id, parent, root, opts, f;
    MountEntry e;
    ls >> id >> parent >> e.majmin >> root >> e.point >> opts;
    while (ls >> f && f != "-") {}  // optional fields end with "-"
    ls >> e.type >> e.source;
    e.point = unescape_mountinfo(e.point);
    e.source = unescape_mountinfo(e.source);
    out.push_back(std::move(e));
  }
  return out;
}

// "maj:min" of the filesystem mounted at `mnt` (the top of the stack), or "".
std::string mount_device(const std::string& mnt) {
  std::string dev;
  for (const auto& e : mounts()) {
    if (e.point == mnt) dev = e.majmin;
  }
  return dev;
}

// The read-ahead to set: the option, or by default 1 MiB when the daemon can (root). Sequential
// readers then keep more requests in flight (fuse-numpy.md: 3.5 -> 4.1 GB/s from memory).
int effective_readahead_kb(int opt) {
  if (opt >= 0) return opt;
  return ::geteuid() == 0 ? 1024 : 0;
}

// The read-ahead in whole requests: with requests capped below it (max_read, for spliced
// replies), a window of 1 MiB took a request of 964 KiB and one of 60 KiB, each a round trip.
// Rounded up to a multiple of the cap, every window is requests of the cap's size: 401 -> 214
// requests for a 210 MB mmap copy of uncompressed data, full copies 2-14% faster, short slices
// and deflate within noise (docs/benchmarks.md, "What each mechanism buys"). Never below what
// was asked; unchanged when requests are not capped.
unsigned whole_requests_kb(unsigned kb, size_t max_read) {
  const size_t cap_kb = max_read / 1024;
  if (kb == 0 || cap_kb == 0) return kb;
  return static_cast<unsigned>((kb + cap_kb - 1) / cap_kb * cap_kb);
}

// Writes the mount's read-ahead to sysfs; false when it cannot (not root, no device).
bool set_readahead(const std::string& mnt, unsigned kb, bool verbose = true) {
  if (kb == 0) return false;
  if (::geteuid() != 0) {
    log::warn("readahead_kb needs root; keeping the kernel's default");
    return false;
  }
  static std::string path;  // the mount's sysfs file, found once (this process serves one mount)
  if (path.empty()) {
    const std::string dev = mount_device(mnt);
    if (dev.empty()) {
      log::warn("readahead_kb: cannot find the mount's device in /proc/self/mountinfo");
      return false;
    }
    path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  }
  std::ofstream out(path);
  out << kb << "\n";
  out.flush();
  if (!out) {
    log::warn("readahead_kb: cannot write " + path);
    return false;
  }
  if (verbose) log::info("read-ahead of " + mnt + " set to " + std::to_string(kb) + " KiB (" + path + ")");
  return true;
}

// Runs while INIT is handled, before its reply: the kernel sets the mount's read-ahead to
// min(its current value, the reply's max_readahead), so both are raised here, and no file can be
// opened (with the kernel's default read-ahead fixed for that open file) before it is done.
void raise_readahead(fusefs::Context& c, fuse_conn_info* conn) {
  if (c.readahead_kb == 0) return;
  conn->max_readahead = c.readahead_kb * 1024u;
  if (set_readahead(c.mountpoint, c.readahead_kb)) {
    const std::string mnt = c.mountpoint;
    c.readahead.enable(c.readahead_kb, [mnt](unsigned kb) { set_readahead(mnt, kb, false); });
  }
}

void syslog_sink(log::Level level, const std::string& msg) {
  int prio = LOG_INFO;
  switch (level) {
    case log::Level::Debug: prio = LOG_DEBUG; break;
    case log::Level::Info: prio = LOG_INFO; break;
    case log::Level::Warn: prio = LOG_WARNING; break;
    case log::Level::Error: prio = LOG_ERR; break;
  }
  ::syslog(prio, "%s", msg.c_str());
}

// The log once the mount exists: -o log=FILE (opened before daemonizing, so a bad path fails in
// the caller's terminal), else syslog when daemonized.
FILE* g_log_file = nullptr;

void file_sink(log::Level level, const std::string& msg) {
  const char* name = level == log::Level::Debug  ? "debug"
                     : level == log::Level::Info ? "info"
                     : level == log::Level::Warn ? "warning"
                                                 : "error";
  // Milliseconds, as in MNT/.h5direct/log: -o debug's lines say when each request went out and
  // came back, and the order within a second is what shows why a read waited.
  std::fprintf(g_log_file, "%s h5direct[%d]: %s: %s\n", log::stamp_now().c_str(), int(::getpid()), name,
               msg.c_str());
  std::fflush(g_log_file);
}

bool have_syslog() {
  struct stat st;
  return ::stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode);
}

bool dir_is_empty(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return true;  // cannot tell: the mount itself will say
  bool empty = true;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

std::string dead_mount(const std::string& mnt) {
  return "mount point " + mnt + " is a dead mount (its daemon is gone): detach it with "
         "'fusermount3 -u -z " + mnt + "', then mount again";
}

// Checks made before mounting, so that a bad command line fails with a message and a non-zero
// status in the caller's terminal (never after daemonizing).
std::string check_paths(config::MountOptions& m) {
  char buf[PATH_MAX];
  struct stat st;
  if (::stat(m.source.c_str(), &st) != 0) {
    return "source " + m.source + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (!S_ISREG(st.st_mode)) return "source " + m.source + " is neither a file nor a directory";
    if (m.vfs.writable) {
      return "-o writable needs a directory as SOURCE (new HDF5 files are created in it): " + m.source;
    }
    if (::access(m.source.c_str(), R_OK) != 0) return "source " + m.source + ": " + std::strerror(errno);
    if (!vfs::is_hdf5_file(m.source)) {
      return "source " + m.source + " is not an HDF5 file (no HDF5 signature) nor a directory";
    }
  } else if (DIR* d = ::opendir(m.source.c_str())) {
    ::closedir(d);
  } else {
    return "source directory " + m.source + " cannot be listed by the daemon (uid " +
           std::to_string(::geteuid()) + "): " + std::strerror(errno);
  }
  if (!::realpath(m.source.c_str(), buf)) return "source " + m.source + ": " + std::strerror(errno);
  m.source = buf;
  if (::stat(m.mountpoint.c_str(), &st) != 0) {
    if (errno == ENOTCONN) return dead_mount(m.mountpoint);
    return "mount point " + m.mountpoint + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "mount point " + m.mountpoint + " is not a directory";
  if (!::realpath(m.mountpoint.c_str(), buf)) {
    return "mount point " + m.mountpoint + ": " + std::strerror(errno);
  }
  m.mountpoint = buf;
  if (m.mountpoint == m.source) {
    return "the mount point " + m.mountpoint + " is the source: choose a mount point outside it";
  }
  if (vfs::is_under(m.mountpoint, m.source)) {
    return "the mount point " + m.mountpoint + " lies inside the source " + m.source +
           " (the daemon would read its own mount): choose a mount point outside it";
  }
  if (vfs::is_under(m.source, m.mountpoint)) {
    return "the source " + m.source + " lies under the mount point " + m.mountpoint +
           " (the mount would hide it from the daemon): choose another mount point";
  }
  for (const auto& e : mounts()) {
    // A dead FUSE mount may still answer stat() from the kernel's cache; statfs always asks.
    struct statfs sfs;
    if (e.point == m.mountpoint && e.type.rfind("fuse", 0) == 0 &&
        ::statfs(m.mountpoint.c_str(), &sfs) != 0 && errno == ENOTCONN) {
      return dead_mount(m.mountpoint);
    }
  }
  if (!m.nonempty) {
    for (const auto& e : mounts()) {
      if (e.point == m.mountpoint) {
        // Not -o nonempty: that would stack a second mount (and daemon) over this one.
        return m.mountpoint + " is already a mount point (" + e.type + " " + e.source +
               "): unmount it first: fusermount3 -u " + m.mountpoint + " (if it is busy: fusermount3 -u -z " +
               m.mountpoint + ", which detaches it now and lets its readers finish; as root: umount)";
      }
    }
    if (!dir_is_empty(m.mountpoint)) {
      return "mount point " + m.mountpoint + " is not empty (the mount would hide its files): "
             "choose an empty directory, or pass -o nonempty";
    }
  }
  if (m.fuse.readahead_kb > 0 && ::geteuid() != 0) {
    return "readahead_kb=" + std::to_string(m.fuse.readahead_kb) +
           " needs root (the daemon writes /sys/class/bdi/MAJ:MIN/read_ahead_kb): leave it out; root "
           "can raise it after mounting: echo N > /sys/class/bdi/$(mountpoint -d " + m.mountpoint +
           ")/read_ahead_kb";
  }
  if (!m.log_file.empty()) {
    g_log_file = std::fopen(m.log_file.c_str(), "ae");
    if (!g_log_file) return "log file " + m.log_file + ": " + std::strerror(errno);
  }
  m.vfs.exclude_path = m.mountpoint;
  return {};
}

// ---- Process limits ------------------------------------------------------------------------------
// Descriptors the daemon holds besides its cache of open source files (max_open_files): stdio,
// the log, /dev/fuse, the signal pipe and slack (16); two pipe ends per helper process (their
// requests and answers, 4 each to be safe); and two per FUSE thread (a thread listing a
// directory holds it open while it opens each entry to read its signature).
uint64_t fds_besides_cache(const config::MountOptions& m) {
  return 16 + 4ull * m.helper.count + 2ull * m.fuse.max_threads;
}

// max_open_files and the thread counts against RLIMIT_NOFILE and RLIMIT_NPROC: the soft limit
// is raised to the hard one when needed; what still does not fit is lowered with a warning
// (descriptors) or refused (threads), never left to fail later with EMFILE or EAGAIN.
std::string check_limits(config::MountOptions& m) {
  struct rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const uint64_t need = m.engine.max_open_files + fds_besides_cache(m);
    if (need > nofile.rlim_cur && nofile.rlim_max > nofile.rlim_cur) {
      struct rlimit raised = nofile;
      raised.rlim_cur = nofile.rlim_max == RLIM_INFINITY ? need : std::min<rlim_t>(need, nofile.rlim_max);
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
    if (need > nofile.rlim_cur) {
      const uint64_t other = fds_besides_cache(m);
      if (nofile.rlim_cur < other + 8) {
        return "the descriptor limit (ulimit -n " + std::to_string(nofile.rlim_cur) + ") is too low: the daemon needs " +
               std::to_string(other) + " besides its open files (16 + 4 per hdf5_helpers + 2 per max_threads) and at "
               "least 8 open files; raise it or lower max_threads";
      }
      const uint64_t fit = nofile.rlim_cur - other;
      log::warn("max_open_files=" + std::to_string(m.engine.max_open_files) + " does not fit the descriptor limit "
                "(ulimit -n " + std::to_string(nofile.rlim_cur) + ", " + std::to_string(other) +
                " needed besides open files: 16 + 4 per hdf5_helpers + 2 per max_threads): using max_open_files=" +
                std::to_string(fit));
      m.engine.max_open_files = static_cast<unsigned>(fit);
    }
  }
  struct rlimit nproc;
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY) {
    // Threads count against the user's process limit: decode threads, FUSE threads, helpers
    // and the daemon's own (signal watcher, main; 8 to spare).
    const uint64_t need = uint64_t(m.engine.threads) + m.fuse.max_threads + m.helper.count + 8;
    if (need > nproc.rlim_cur) {
      return "threads=" + std::to_string(m.engine.threads) + " and max_threads=" + std::to_string(m.fuse.max_threads) +
             " need " + std::to_string(need) + " processes (threads + max_threads + hdf5_helpers + 8) but the limit is " +
             std::to_string(nproc.rlim_cur) + " (ulimit -u): lower them";
    }
  }
  return {};
}

// ---- Signals ------------------------------------------------------------------------------------
// SIGINT, SIGTERM, SIGHUP: with no file open, the loop ends and the mount goes (as libfuse's own
// handlers do). With files open (a mapped file stays open until unmapped), the first signal
// detaches the mount instead (lazy unmount, after saying so): the open files keep being served
// until they are closed, then the kernel ends the session and the daemon exits. A second signal
// ends the loop at once.
std::atomic<fuse_session*> g_session{nullptr};
std::atomic<int> g_signals{0};
int g_signal_pipe[2] = {-1, -1};
// The read helpers' stop descriptor (HelperOptions::stop_fd, an eventfd): a signal that ends the
// loop writes it, so requests waiting on a helper (a hung libhdf5 call) end at once and the FUSE
// loop, which joins its workers, ends within a moment rather than hdf5_timeout.
int g_helpers_stop = -1;

void stop_helpers() {
  if (g_helpers_stop < 0) return;
  const uint64_t one = 1;
  if (::write(g_helpers_stop, &one, sizeof one) != sizeof one) {
    // Already stopping (the counter is full) or closed: nothing more to do.
  }
}

// The byte a second signal sends the watcher: end the process if the loop has not ended within
// kStopGrace (its threads may wait on a source that never answers: data on tape, a hung server;
// such a pread ends only with the process).
constexpr char kArmStop = 1;
constexpr auto kStopGrace = std::chrono::seconds(5);

void on_signal(int sig) {
  const int n = g_signals.fetch_add(1);
  if (n == 0 && vfs::OpenFile::live() > 0) {
    const char c = static_cast<char>(sig);
    if (::write(g_signal_pipe[1], &c, 1) == 1) return;  // the watcher detaches the mount
  }
  if (fuse_session* se = g_session.load()) fuse_session_exit(se);
  stop_helpers();
  if (n >= 1) {
    const char c = kArmStop;
    if (::write(g_signal_pipe[1], &c, 1) != 1) {
      // The watcher cannot hear: the loop ends as it can.
    }
  }
}

bool install_signal_handlers(fuse_session* se) {
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return false;
  g_session = se;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the main thread's wait in the loop must see it
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  return ::sigaction(SIGINT, &sa, nullptr) == 0 && ::sigaction(SIGTERM, &sa, nullptr) == 0 &&
         ::sigaction(SIGHUP, &sa, nullptr) == 0 && ::sigaction(SIGPIPE, &ign, nullptr) == 0;
}

void remove_signal_handlers() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
  g_session = nullptr;
}

// Detaches the mount (MNT_DETACH as root, fusermount3 -u -z otherwise).
bool detach(const std::string& mnt) {
  if (::umount2(mnt.c_str(), MNT_DETACH) == 0) return true;
  pid_t pid;
  const char* argv[] = {"fusermount3", "-u", "-z", "-q", "--", mnt.c_str(), nullptr};
  if (::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) {
    return false;
  }
  int st = 0;
  return ::waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// The thread that does what a signal handler cannot: say how many files are open, then detach.
void signal_watcher(const std::string& mnt) {
  char c;
  while (true) {
    const ssize_t n = ::read(g_signal_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || c == 0) return;  // closed, or told to stop
    if (c == kArmStop) {
      // A second signal: the loop is ending. Threads waiting on a source that never answers keep
      // it from ending (the session joins its workers, the engine its pool); after kStopGrace
      // the process ends with them, so SIGTERM always ends the daemon.
      pollfd p{g_signal_pipe[0], POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kStopGrace).count()));
      if (ready > 0) {
        char d;
        if (::read(g_signal_pipe[0], &d, 1) == 1 && d == 0) return;  // ended in time
        continue;
      }
      log::error("still stopping " + std::to_string(std::chrono::seconds(kStopGrace).count()) +
                 " s after the second signal: some reads wait on a source that does not answer (data on "
                 "tape, a hung server); ending the process");
      ::_exit(1);
    }
    const int64_t open = vfs::OpenFile::live();
    log::warn(std::string(strsignal(c)) + " with " + std::to_string(open) + " file" + (open == 1 ? "" : "s") +
              " open or mapped under " + mnt + ": detaching the mount (lazy unmount). Readers of "
              "open files keep reading until they close them; then the daemon exits. A second "
              "signal stops it at once (readers then get ENOTCONN, mapped pages not yet read SIGBUS).");
    if (detach(mnt)) {
      log::info("detached " + mnt + "; serving the open files until they are closed");
    } else {
      log::error("cannot detach " + mnt + " (umount2 and fusermount3 -u -z failed): stopping now");
      if (fuse_session* se = g_session.load()) fuse_session_exit(se);
      stop_helpers();
      ::kill(::getpid(), SIGTERM);  // wakes the loop's wait (counted as the second signal)
    }
  }
}

struct SessionDeleter {
  void operator()(fuse_session* s) const { fuse_session_destroy(s); }
};

}  // namespace

std::string program_name(const char* argv0) {
  const std::string p = argv0 ? argv0 : "";
  const std::string base = p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
  return base.empty() ? "h5direct" : base;
}

int run_mount(int argc, char** argv) {
  const std::string prog = argc > 0 ? argv[0] : "h5direct";
  g_program = program_name(argc > 0 ? argv[0] : nullptr);
  log::set_program(g_program);
  config::MountOptions m;
  try {
    m = config::parse_command_line(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
  } catch (const std::exception& e) {
    die(std::string("error: ") + e.what());
    std::fputs((config::usage_lines(g_program) + "(" + g_program + " --help: every option)\n").c_str(), stderr);
    return 1;
  }
  if (m.help) {
    std::fputs(config::usage_text(g_program).c_str(), stdout);
    return 0;
  }
  if (m.version) {
    std::printf("h5direct %s (libfuse %s)\n", H5D_VERSION, fuse_pkgversion());
    return 0;
  }
  if (std::string err = check_paths(m); !err.empty()) return die("error: " + err);
  if (std::string err = check_limits(m); !err.empty()) return die("error: " + err);
  log::set_debug(m.debug);
  // The helpers' sandbox as this kernel allows it: refused here, in the caller's terminal, when
  // strict and a layer is missing (each helper enters the same plan: helper/sandbox.h).
  const SandboxPlan sandbox = plan_sandbox(probe_kernel(), m.helper.sandbox);
  if (m.helper.sandbox == SandboxMode::Strict && !sandbox.complete()) {
    std::string missing;
    for (const std::string& s : sandbox.missing) missing += (missing.empty() ? "" : "; ") + s;
    return die("error: -o sandbox=strict, but this kernel or container lacks: " + missing +
               " (without sandbox=strict the helpers run with every layer it has)");
  }

  std::string mount_opts = std::string(m.vfs.writable ? "rw" : "ro") + ",default_permissions,fsname=" +
                           escape_opt(m.fuse.fsname.empty() ? m.source : m.fuse.fsname) +
                           ",subtype=" + escape_opt(m.fuse.subtype);
  if (m.fuse.allow_other) mount_opts += ",allow_other";
  if (m.fuse.allow_root) mount_opts += ",allow_root";
  if (m.fuse.auto_unmount) mount_opts += ",auto_unmount";
  // Spliced replies must fit libfuse's pipe: cap the requests to what does (fusefs/adapter.h).
  size_t max_read = 0;
  if (m.fuse.splice && !m.vfs.writable && fusefs::splice_max_read() < (1u << 20)) {
    max_read = fusefs::splice_max_read();
    mount_opts += ",max_read=" + std::to_string(max_read);
  }
  std::vector<std::string> arg_store = {prog, "-o", mount_opts};
  std::vector<char*> fargv;
  for (auto& a : arg_store) fargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());

  fusefs::Context ctx;
  ctx.opts = m.fuse;
  ctx.mountpoint = m.mountpoint;
  ctx.readahead_kb =
      whole_requests_kb(static_cast<unsigned>(std::max(0, effective_readahead_kb(m.fuse.readahead_kb))), max_read);
  ctx.at_init = raise_readahead;
  ctx.max_read = max_read;
  std::unique_ptr<fuse_session, SessionDeleter> se(
      fuse_session_new(&args, &fusefs::operations(), sizeof(fuse_lowlevel_ops), &ctx));
  fuse_opt_free_args(&args);
  if (!se) return die("error: cannot create the FUSE session (see the message above)");
  ctx.se = se.get();
  if (!install_signal_handlers(se.get())) return die("error: cannot install signal handlers");
  if (fuse_session_mount(se.get(), m.mountpoint.c_str()) != 0) {
    remove_signal_handlers();
    return die("error: cannot mount on " + m.mountpoint + " (see the message above)");
  }
  // The mount exists: only now may the caller be released.
  if (!m.foreground) {
    if (!g_log_file && !have_syslog()) {
      log::warn("no syslog on this machine (/dev/log): the daemon's recent log lines are only in " +
                m.mountpoint + "/.h5direct/log; use -o log=FILE to keep all of them (or -f to stay in the "
                "foreground)");
    }
    if (fuse_daemonize(0) != 0) {
      fuse_session_unmount(se.get());
      remove_signal_handlers();
      return die("error: cannot daemonize");
    }
    if (!g_log_file) {
      ::openlog("h5direct", LOG_PID, LOG_DAEMON);
      log::set_sink(syslog_sink);
    }
  }
  if (g_log_file) log::set_sink(file_sink);

  int status = 0;
  {
    // Threads are created only now (after fork). Our own threads must not take the signals that
    // end the loop: libfuse expects them on the thread waiting in fuse_session_loop_mt.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    // Everything that needed more than serving does is done (the mount, daemonizing): capabilities
    // are per thread, so they are given up before the first thread starts.
    const std::string privileges = drop_privileges(m.vfs.writable);
    std::thread watcher(signal_watcher, m.mountpoint);
    std::unique_ptr<Engine> engine;
    std::unique_ptr<H5Files> files;   // destroyed after the Vfs and the writer, before the engine
    std::unique_ptr<Writer> writer;  // rw mounts; destroyed after the Vfs, before the files
    std::unique_ptr<vfs::Vfs> fs;
    try {
      // libhdf5 runs in helper processes, never in the daemon (core/h5lib/h5helper.h).
      m.helper.path = find_helper();
      if (m.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      m.helper.roots = {m.source};  // what the helpers may open (core/h5lib/broker.h)
      g_helpers_stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      m.helper.stop_fd = g_helpers_stop;
      engine = std::make_unique<Engine>(m.engine);
      files = std::make_unique<H5Files>(*engine, m.helper);
      files->metadata().start();
      if (m.helper.sandbox == SandboxMode::Off) {
        log::warn("sandbox: off (-o sandbox=off, for debugging only): the helpers that run libhdf5 have the daemon's "
                  "rights, and a file crafted against libhdf5 runs its code with them");
      } else {
        log::info("sandbox: " + describe(sandbox));
      }
      fs = std::make_unique<vfs::Vfs>(*engine, *files, m.vfs, m.source);
      vfs::install_builtin_providers(*fs, m.vfs);
      fs->set_listener(&ctx.invalidator);
      ctx.invalidator.start(se.get());  // with the signals blocked, as every thread of ours
      if (m.vfs.writable) {
        writer = std::make_unique<Writer>(*files, m.writer);
        fs->set_writer(writer.get());
      }
      log::info("daemon privileges: " + privileges);
    } catch (const std::exception& e) {
      log::error(std::string("cannot start: ") + e.what());
      status = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (status == 0) {
      ctx.vfs = fs.get();
      log::info("serving " + m.source + " at " + m.mountpoint);
      fuse_loop_config* cfg = fuse_loop_cfg_create();
      fuse_loop_cfg_set_clone_fd(cfg, 0);
      fuse_loop_cfg_set_max_threads(cfg, m.fuse.max_threads);
      fuse_loop_cfg_set_idle_threads(cfg, m.fuse.max_idle_threads);
      // > 0: the signal that ended the loop (a clean unmount); < 0: an error.
      int r = fuse_session_loop_mt(se.get(), cfg);
      // libfuse ends the loop quietly on ENODEV (unmounted) but not on ECONNABORTED, which the
      // kernel also returns when the connection shuts down while a worker is taking a request off
      // the queue: after a lazy unmount, the last close sends RELEASE and ends the superblock at
      // about the same moment (2 of 150 signal-detach runs under load). Either way the session is over
      // and nothing was lost, as with ENODEV.
      if (r == -ECONNABORTED) {
        log::info("the kernel ended the connection while a request was being read (unmounted or aborted)");
        r = 0;
      }
      status = r < 0 ? 1 : 0;
      if (r < 0) log::error(std::string("session loop failed: ") + std::strerror(-r));
      fuse_loop_cfg_destroy(cfg);
    }
    ctx.invalidator.stop();  // before the session and the Vfs go
    // Unmount: everything pending reaches the files, which are closed (H5Fflush, H5Fclose).
    if (writer) {
      try {
        writer->close_all();
      } catch (const std::exception& e) {
        if (!already_logged(e)) log::error(std::string("flushing written files: ") + e.what());
        status = 1;
      }
    }
    fuse_session_unmount(se.get());
    remove_signal_handlers();
    se.reset();
    ctx.handles.clear();  // files and directories still open when the session ended
    ctx.vfs = nullptr;
    // The engine joins its pool, whose workers may wait on a source that never answers: the
    // watcher, armed by a second signal, ends the process if this takes too long.
    fs.reset();
    writer.reset();
    if (engine) engine->pool().shutdown();  // its last tasks may use the files' arrays
    files.reset();
    engine.reset();
    const char stop = 0;
    if (::write(g_signal_pipe[1], &stop, 1) != 1) log::warn("cannot stop the signal watcher");
    watcher.join();
  }
  log::info("unmounted " + m.mountpoint);
  return status;
}

}  // namespace h5d::daemon
