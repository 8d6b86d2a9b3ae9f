#include "daemon/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
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
#include "fusefs/session.h"
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

// The libfuse options of the mount. Spliced replies must fit libfuse's pipe: with splicing,
// requests are capped to what does (fusefs/adapter.h); `max_read` says to what (0: not capped).
std::string fuse_options(const config::MountOptions& m, size_t& max_read) {
  std::string o = std::string(m.vfs.writable ? "rw" : "ro") + ",default_permissions,fsname=" +
                  escape_opt(m.fuse.fsname.empty() ? m.source : m.fuse.fsname) + ",subtype=" + escape_opt(m.fuse.subtype);
  if (m.fuse.allow_other) o += ",allow_other";
  if (m.fuse.allow_root) o += ",allow_root";
  if (m.fuse.auto_unmount) o += ",auto_unmount";
  max_read = 0;
  if (m.fuse.splice && !m.vfs.writable && fusefs::splice_max_read() < (1u << 20)) {
    max_read = fusefs::splice_max_read();
    o += ",max_read=" + std::to_string(max_read);
  }
  return o;
}

// Into the background once the mount exists (only now may the caller be released), logging to
// syslog unless -o log=FILE.
void go_background(const config::MountOptions& m, fusefs::Session& session) {
  if (!m.foreground) {
    if (!g_log_file && !have_syslog()) {
      log::warn("no syslog on this machine (/dev/log): the daemon's recent log lines are only in " + m.mountpoint +
                "/.h5direct/log; use -o log=FILE to keep all of them (or -f to stay in the foreground)");
    }
    session.daemonize();
    if (!g_log_file) {
      ::openlog("h5direct", LOG_PID, LOG_DAEMON);
      log::set_sink(syslog_sink);
    }
  }
  if (g_log_file) log::set_sink(file_sink);
}

// What the mount serves, in the order it is built; torn down in reverse by stop_serving.
struct Served {
  int helpers_stop = -1;  // the read helpers' stop eventfd (HelperOptions::stop_fd)
  std::unique_ptr<Engine> engine;
  std::unique_ptr<H5Files> files;   // destroyed after the Vfs and the writer, before the engine
  std::unique_ptr<Writer> writer;   // rw mounts; destroyed after the Vfs, before the files
  std::unique_ptr<vfs::Vfs> fs;
};

// Builds what the mount serves (Error or std::exception on failure). libhdf5 runs in helper
// processes, never in the daemon (core/h5lib/h5helper.h).
void start_serving(config::MountOptions& m, const SandboxPlan& sandbox, fusefs::Context& ctx,
                   fusefs::Session& session, Served& s) {
  m.helper.path = find_helper();
  if (m.helper.path.empty())
    throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
  m.helper.roots = {m.source};  // what the helpers may open (core/h5lib/broker.h)
  // A signal that ends the loop writes it: requests waiting on a helper (a hung libhdf5 call)
  // end at once, and the loop, which joins its workers, ends within a moment.
  s.helpers_stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m.helper.stop_fd = s.helpers_stop;
  session.set_stop_fd(s.helpers_stop);
  s.engine = std::make_unique<Engine>(m.engine);
  s.files = std::make_unique<H5Files>(*s.engine, m.helper);
  s.files->metadata().start();
  if (m.helper.sandbox == SandboxMode::Off) {
    log::warn("sandbox: off (-o sandbox=off, for debugging only): the helpers that run libhdf5 have the daemon's "
              "rights, and a file crafted against libhdf5 runs its code with them");
  } else {
    log::info("sandbox: " + describe(sandbox));
  }
  s.fs = std::make_unique<vfs::Vfs>(*s.engine, *s.files, m.vfs, m.source);
  vfs::install_builtin_providers(*s.fs, m.vfs);
  s.fs->set_listener(&ctx.invalidator);
  ctx.invalidator.start(ctx.se);  // with the signals blocked, as every thread of ours
  if (m.vfs.writable) {
    s.writer = std::make_unique<Writer>(*s.files, m.writer);
    s.fs->set_writer(s.writer.get());
  }
}

// After the loop: what is pending reaches the files (H5Fflush, H5Fclose), the mount goes, then
// what was served, in reverse. Returns 1 when written files could not be flushed, else 0.
int stop_serving(fusefs::Context& ctx, fusefs::Session& session, Served& s) {
  int status = 0;
  ctx.invalidator.stop();  // before the session and the Vfs go
  if (s.writer) {
    try {
      s.writer->close_all();
    } catch (const std::exception& e) {
      if (!already_logged(e)) log::error(std::string("flushing written files: ") + e.what());
      status = 1;
    }
  }
  session.unmount();
  ctx.handles.clear();  // files and directories still open when the session ended
  ctx.vfs = nullptr;
  // The engine joins its pool, whose workers may wait on a source that never answers: the
  // session's watcher, armed by a second signal, ends the process if this takes too long.
  s.fs.reset();
  s.writer.reset();
  if (s.engine) s.engine->pool().shutdown();  // its last tasks may use the files' arrays
  s.files.reset();
  s.engine.reset();
  return status;
}

}  // namespace

std::string program_name(const char* argv0) {
  const std::string p = argv0 ? argv0 : "";
  const std::string base = p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
  return base.empty() ? "h5direct" : base;
}

namespace {

constexpr int kGoOn = -1;

// Parses and checks the command line (help and version answered here) and plans the helpers'
// sandbox: kGoOn to mount, else the exit status.
int prepare(int argc, char** argv, config::MountOptions& m, SandboxPlan& sandbox) {
  g_program = program_name(argc > 0 ? argv[0] : nullptr);
  log::set_program(g_program);
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
  sandbox = plan_sandbox(probe_kernel(), m.helper.sandbox);
  if (m.helper.sandbox == SandboxMode::Strict && !sandbox.complete()) {
    std::string missing;
    for (const std::string& s : sandbox.missing) missing += (missing.empty() ? "" : "; ") + s;
    return die("error: -o sandbox=strict, but this kernel or container lacks: " + missing +
               " (without sandbox=strict the helpers run with every layer it has)");
  }
  return kGoOn;
}

}  // namespace

int run_mount(int argc, char** argv) {
  config::MountOptions m;
  SandboxPlan sandbox;
  if (const int rc = prepare(argc, argv, m, sandbox); rc != kGoOn) return rc;
  const std::string prog = argc > 0 ? argv[0] : "h5direct";
  fusefs::Context ctx;
  size_t max_read = 0;
  const std::string fuse_opts = fuse_options(m, max_read);
  ctx.opts = m.fuse;
  ctx.mountpoint = m.mountpoint;
  ctx.readahead_kb =
      whole_requests_kb(static_cast<unsigned>(std::max(0, effective_readahead_kb(m.fuse.readahead_kb))), max_read);
  ctx.at_init = raise_readahead;
  ctx.max_read = max_read;
  std::unique_ptr<fusefs::Session> session;
  try {
    session = std::make_unique<fusefs::Session>(ctx, prog, fuse_opts);
    go_background(m, *session);
  } catch (const std::exception& e) {
    return die(std::string("error: ") + e.what());
  }

  int status = 0;
  Served served;
  {
    // Threads are created only now (after fork), none taking the signals that end the loop.
    fusefs::Session::BlockedSignals blocked;
    // Everything that needed more than serving does is done (the mount, daemonizing): capabilities
    // are per thread, so they are given up before the first thread starts.
    const std::string privileges = drop_privileges(m.vfs.writable);
    session->start_watcher();
    try {
      start_serving(m, sandbox, ctx, *session, served);
      log::info("daemon privileges: " + privileges);
    } catch (const std::exception& e) {
      log::error(std::string("cannot start: ") + e.what());
      status = 1;
    }
  }
  if (status == 0) {
    ctx.vfs = served.fs.get();
    log::info("serving " + m.source + " at " + m.mountpoint);
    status = session->loop(m.fuse.max_threads, m.fuse.max_idle_threads);
  }
  status = std::max(status, stop_serving(ctx, *session, served));
  session.reset();  // its watcher, last: the teardown above may wait on a stuck source
  if (served.helpers_stop >= 0) ::close(served.helpers_stop);
  log::info("unmounted " + m.mountpoint);
  return status;
}

}  // namespace h5d::daemon
