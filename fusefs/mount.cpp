#include "fusefs/mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/options.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/log.h"
#include "core/writer.h"
#include "fusefs/adapter.h"
#include "vfs/providers.h"
#include "vfs/tree.h"
#include "vfs/vfs.h"

#ifndef H5D_VERSION
#define H5D_VERSION "unknown"
#endif

namespace h5d::fusefs {
namespace {

int die(const std::string& msg) {
  std::fprintf(stderr, "mount.h5direct: %s\n", msg.c_str());
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

// "maj:min" of the filesystem mounted at `mnt`, from /proc/self/mountinfo (stat() on the mount
// would send a request to ourselves before the loop runs).
std::string mount_device(const std::string& mnt) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, dev;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, majmin, root, point;
    ls >> id >> parent >> majmin >> root >> point;
    if (point == mnt) dev = majmin;  // the last one is the top of the stack
  }
  return dev;
}

// The read-ahead to set: the option, or by default 1 MiB when the daemon can (root). Sequential
// readers then keep more requests in flight (fuse-numpy.md: 3.5 -> 4.1 GB/s from memory).
int effective_readahead_kb(int opt) {
  if (opt >= 0) return opt;
  return ::geteuid() == 0 ? 1024 : 0;
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
void raise_readahead(Context& c, fuse_conn_info* conn) {
  if (c.readahead_kb == 0) return;
  conn->max_readahead = c.readahead_kb * 1024u;
  if (set_readahead(c.mountpoint, c.readahead_kb)) {
    c.readahead_now = c.readahead_kb;
    c.set_readahead = [](Context& cx, unsigned kb) { set_readahead(cx.mountpoint, kb, false); };
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
      return "-o rw needs a directory as SOURCE (new HDF5 files are created in it): " + m.source;
    }
    if (::access(m.source.c_str(), R_OK) != 0) return "source " + m.source + ": " + std::strerror(errno);
    if (!vfs::is_hdf5_file(m.source)) {
      return "source " + m.source + " is not an HDF5 file (no HDF5 signature) nor a directory";
    }
  }
  if (!::realpath(m.source.c_str(), buf)) return "source " + m.source + ": " + std::strerror(errno);
  m.source = buf;
  if (::stat(m.mountpoint.c_str(), &st) != 0) {
    return "mount point " + m.mountpoint + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "mount point " + m.mountpoint + " is not a directory";
  if (!::realpath(m.mountpoint.c_str(), buf)) {
    return "mount point " + m.mountpoint + ": " + std::strerror(errno);
  }
  m.mountpoint = buf;
  return {};
}

struct SessionDeleter {
  void operator()(fuse_session* s) const { fuse_session_destroy(s); }
};

}  // namespace

int run_mount(int argc, char** argv) {
  const std::string prog = argc > 0 ? argv[0] : "mount.h5direct";
  config::MountOptions m;
  try {
    m = config::parse_command_line(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
  } catch (const std::exception& e) {
    return die(std::string("error: ") + e.what());
  }
  if (m.help) {
    std::fputs(config::usage_text("mount.h5direct").c_str(), stdout);
    return 0;
  }
  if (m.version) {
    std::printf("h5direct %s (libfuse %s)\n", H5D_VERSION, fuse_pkgversion());
    return 0;
  }
  if (std::string err = check_paths(m); !err.empty()) return die("error: " + err);
  log::set_debug(m.debug);

  std::string mount_opts = std::string(m.vfs.writable ? "rw" : "ro") + ",default_permissions,fsname=" +
                           escape_opt(m.fuse.fsname.empty() ? m.source : m.fuse.fsname) +
                           ",subtype=" + escape_opt(m.fuse.subtype);
  if (m.fuse.allow_other) mount_opts += ",allow_other";
  if (m.fuse.allow_root) mount_opts += ",allow_root";
  if (m.fuse.auto_unmount) mount_opts += ",auto_unmount";
  std::vector<std::string> arg_store = {prog, "-o", mount_opts};
  std::vector<char*> fargv;
  for (auto& a : arg_store) fargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());

  Context ctx;
  ctx.opts = m.fuse;
  ctx.mountpoint = m.mountpoint;
  ctx.readahead_kb = static_cast<unsigned>(std::max(0, effective_readahead_kb(m.fuse.readahead_kb)));
  ctx.at_init = raise_readahead;
  std::unique_ptr<fuse_session, SessionDeleter> se(
      fuse_session_new(&args, &operations(), sizeof(fuse_lowlevel_ops), &ctx));
  fuse_opt_free_args(&args);
  if (!se) return die("error: cannot create the FUSE session (see the message above)");
  ctx.se = se.get();
  if (fuse_set_signal_handlers(se.get()) != 0) return die("error: cannot install signal handlers");
  if (fuse_session_mount(se.get(), m.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se.get());
    return die("error: cannot mount on " + m.mountpoint + " (see the message above)");
  }
  // The mount exists: only now may the caller be released.
  if (!m.foreground) {
    if (fuse_daemonize(0) != 0) {
      fuse_session_unmount(se.get());
      fuse_remove_signal_handlers(se.get());
      return die("error: cannot daemonize");
    }
    ::openlog("h5direct", LOG_PID, LOG_DAEMON);
    log::set_sink(syslog_sink);
  }

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
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Writer> writer;  // rw mounts; destroyed after the Vfs, before the engine
    std::unique_ptr<vfs::Vfs> fs;
    try {
      // libhdf5 runs in helper processes, never in the daemon (core/h5helper.h).
      m.engine.helper.path = find_helper();
      if (m.engine.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      engine = std::make_unique<Engine>(m.engine);
      fs = std::make_unique<vfs::Vfs>(*engine, m.vfs, m.source);
      vfs::install_builtin_providers(*fs, m.vfs);
      if (m.vfs.writable) {
        writer = std::make_unique<Writer>(*engine, m.writer);
        fs->set_writer(writer.get());
      }
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
      const int r = fuse_session_loop_mt(se.get(), cfg);
      status = r < 0 ? 1 : 0;
      if (r < 0) log::error(std::string("session loop failed: ") + std::strerror(-r));
      fuse_loop_cfg_destroy(cfg);
    }
    // Unmount: everything pending reaches the files, which are closed (H5Fflush, H5Fclose).
    if (writer) {
      try {
        writer->close_all();
      } catch (const std::exception& e) {
        log::error(std::string("flushing written files: ") + e.what());
        status = 1;
      }
    }
    fuse_session_unmount(se.get());
    fuse_remove_signal_handlers(se.get());
    se.reset();
    ctx.vfs = nullptr;
  }
  log::info("unmounted " + m.mountpoint);
  return status;
}

}  // namespace h5d::fusefs
