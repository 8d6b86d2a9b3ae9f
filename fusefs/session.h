// The FUSE session's life: created and mounted, daemonized, served by libfuse's multi-threaded
// loop, ended by a signal, unmounted. What the daemon serves (the Vfs and what it needs) is
// built and torn down by daemon/mount.cpp around Session::loop.
//
// Signals. SIGINT, SIGTERM and SIGHUP end the session. While files are open or mapped through
// the mount, the first one detaches the mount instead (lazy unmount, after saying so): the open
// files keep being served until they are closed, then the kernel ends the session. A second
// signal ends the loop at once, and the process kSecondSignalGrace later if threads still wait on
// a source that never answers (data on tape, a hung server: such a pread ends only with the
// process). A signal that ends the loop also writes the stop descriptor (set_stop_fd), so that
// requests waiting on a helper end at once.
#pragma once
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "fusefs/adapter.h"

namespace h5d::fusefs {

class Session {
 public:
  static constexpr std::chrono::seconds kSecondSignalGrace{5};

  // Creates the session (libfuse options `fuse_opts`, program name `prog`) with ctx as its
  // userdata, installs the signal handlers and mounts it at ctx.mountpoint; Error otherwise
  // (libfuse has printed why). Sets ctx.se. One Session per process (signal handlers are).
  Session(Context& ctx, const std::string& prog, const std::string& fuse_opts);
  ~Session();  // unmount() if not done, then stops the watcher
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Into the background (fuse_daemonize): before any thread is started. Error on failure.
  void daemonize();
  // An eventfd written (1) when a signal ends the loop; -1: none.
  void set_stop_fd(int fd);

  // The signals that end the loop, blocked in the calling thread while it lives: threads started
  // meanwhile (ours, the engine's, the helpers' readers) never take them; libfuse expects them on
  // the thread waiting in loop().
  class BlockedSignals {
   public:
    BlockedSignals();
    ~BlockedSignals() { restore(); }
    void restore();  // early: before loop()
   private:
    sigset_t old_;
    bool restored_ = false;
  };
  // Starts the thread that does what a handler cannot (log, detach, end a stuck stop); call with
  // the signals blocked, after daemonize().
  void start_watcher();

  // Serves until unmounted or a signal ends the session: 0 on a clean end, 1 on an error (logged).
  int loop(unsigned max_threads, unsigned max_idle_threads);
  // Unmounts, removes the handlers and destroys the session (idempotent). The watcher stays until
  // the destructor: tearing down what was served may wait on a stuck source, and a second
  // signal must still end the process then.
  void unmount();

 private:
  Context& ctx_;
  fuse_session* se_ = nullptr;
  bool mounted_ = false;
  std::thread watcher_;
};

}  // namespace h5d::fusefs
