// The FUSE session's life (session.h).
#include "fusefs/session.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "vfs/tree.h"

extern char** environ;

namespace h5d::fusefs {
namespace {

// Process-wide: the signal handler reaches them.
std::atomic<fuse_session*> g_session{nullptr};
std::atomic<int> g_signals{0};
std::atomic<int> g_stop_fd{-1};
int g_signal_pipe[2] = {-1, -1};

// The byte a second signal sends the watcher: end the process if the loop has not ended within
// kSecondSignalGrace.
constexpr char kArmStop = 1;

void write_stop_fd() {
  const int fd = g_stop_fd.load();
  if (fd < 0) return;
  const uint64_t one = 1;
  if (::write(fd, &one, sizeof one) != sizeof one) {
    // Already stopping (the counter is full) or closed: nothing more to do.
  }
}

void on_signal(int sig) {
  const int n = g_signals.fetch_add(1);
  if (n == 0 && vfs::OpenFile::live() > 0) {
    const char c = static_cast<char>(sig);
    if (::write(g_signal_pipe[1], &c, 1) == 1) return;  // the watcher detaches the mount
  }
  if (fuse_session* se = g_session.load()) fuse_session_exit(se);
  write_stop_fd();
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

// The thread that does what a signal handler cannot: say how many files are open, then detach;
// after a second signal, end the process if the loop does not end in time.
void signal_watcher(const std::string& mnt) {
  char c;
  while (true) {
    const ssize_t n = ::read(g_signal_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || c == 0) return;  // closed, or told to stop
    if (c == kArmStop) {
      // Threads waiting on a source that never answers keep the loop from ending (the session
      // joins its workers, the engine its pool): after the grace the process ends with them, so
      // SIGTERM always ends the daemon.
      pollfd p{g_signal_pipe[0], POLLIN, 0};
      const auto grace = std::chrono::milliseconds(Session::kSecondSignalGrace);
      const int ready = ::poll(&p, 1, static_cast<int>(grace.count()));
      if (ready > 0) {
        char d;
        if (::read(g_signal_pipe[0], &d, 1) == 1 && d == 0) return;  // ended in time
        continue;
      }
      log::error("still stopping " + std::to_string(Session::kSecondSignalGrace.count()) +
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
      write_stop_fd();
      ::kill(::getpid(), SIGTERM);  // wakes the loop's wait (counted as the second signal)
    }
  }
}

}  // namespace

Session::Session(Context& ctx, const std::string& prog, const std::string& fuse_opts) : ctx_(ctx) {
  std::vector<std::string> arg_store = {prog, "-o", fuse_opts};
  std::vector<char*> fargv;
  for (auto& a : arg_store) fargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());
  se_ = fuse_session_new(&args, &operations(), sizeof(fuse_lowlevel_ops), &ctx_);
  fuse_opt_free_args(&args);
  if (!se_) fail(EINVAL, "cannot create the FUSE session (see the message above)");
  ctx_.se = se_;
  if (!install_signal_handlers(se_)) {
    fuse_session_destroy(se_);
    fail(errno, "cannot install signal handlers");
  }
  if (fuse_session_mount(se_, ctx_.mountpoint.c_str()) != 0) {
    remove_signal_handlers();
    fuse_session_destroy(se_);
    fail(EIO, "cannot mount on " + ctx_.mountpoint + " (see the message above)");
  }
  mounted_ = true;
}

Session::~Session() {
  unmount();
  if (watcher_.joinable()) {
    const char stop = 0;
    if (::write(g_signal_pipe[1], &stop, 1) != 1) log::warn("cannot stop the signal watcher");
    watcher_.join();
  }
  for (int& fd : g_signal_pipe) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

void Session::daemonize() {
  if (fuse_daemonize(0) != 0) fail(errno ? errno : EIO, "cannot daemonize");
}

void Session::set_stop_fd(int fd) { g_stop_fd = fd; }

Session::BlockedSignals::BlockedSignals() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}

void Session::BlockedSignals::restore() {
  if (restored_) return;
  restored_ = true;
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void Session::start_watcher() { watcher_ = std::thread(signal_watcher, ctx_.mountpoint); }

int Session::loop(unsigned max_threads, unsigned max_idle_threads) {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, max_threads);
  fuse_loop_cfg_set_idle_threads(cfg, max_idle_threads);
  // > 0: the signal that ended the loop (a clean unmount); < 0: an error.
  int r = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  // libfuse ends the loop quietly on ENODEV (unmounted) but not on ECONNABORTED, which the
  // kernel also returns when the connection shuts down while a worker is taking a request off
  // the queue: after a lazy unmount, the last close sends RELEASE and ends the superblock at
  // about the same moment (2 of 150 signal-detach runs under load). Either way the session is
  // over and nothing was lost, as with ENODEV.
  if (r == -ECONNABORTED) {
    log::info("the kernel ended the connection while a request was being read (unmounted or aborted)");
    r = 0;
  }
  if (r < 0) log::error(std::string("session loop failed: ") + std::strerror(-r));
  return r < 0 ? 1 : 0;
}

void Session::unmount() {
  if (!se_) return;
  if (mounted_) fuse_session_unmount(se_);
  mounted_ = false;
  remove_signal_handlers();
  fuse_session_destroy(se_);
  se_ = nullptr;
  ctx_.se = nullptr;
}

}  // namespace h5d::fusefs
