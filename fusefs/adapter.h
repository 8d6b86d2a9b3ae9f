// The thin libfuse3 low-level adapter: each handler decodes its request, calls the Vfs and
// replies; every failure goes through one function that maps it to an errno, counts it and logs
// it once. Nothing here knows about HDF5 or arrays.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "fusefs/fuse_options.h"
#include "vfs/vfs.h"

namespace h5d::fusefs {

// A failed read is asked for again by the kernel: a read-ahead that fails is followed by a read
// of the page the reader waits on, and a mapping's fault tries its page two or three times, each
// failing on the same chunk. To the reader that is one failure: it is reported once (an error line,
// stats.json recent_errors), and the same failure of the same file within kWindow is logged at
// debug level only. Every request is still answered with its error and counted (error_replies).
class RepeatedFailures {
 public:
  static constexpr std::chrono::milliseconds kWindow{1000};
  static constexpr size_t kKeep = 64;  // failures remembered (the most recent)
  // Whether the failure of a read of `ino` (errno `err`, at `place`; `message` where the place
  // is empty) repeats one reported less than kWindow ago; remembers it when it does not.
  bool repeat(uint64_t ino, int err, const Place& place, const std::string& message);

 private:
  struct Seen {
    uint64_t ino;
    int err;
    std::string what;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards seen_
  std::vector<Seen> seen_;
};

// The file and directory handles libfuse holds (fi->fh), owned here. A handle the kernel never
// released (the daemon stopped with files open, or after a lazy unmount) is freed by clear() when
// the session has ended, before the Vfs it points into goes (no leak at exit).
class Handles {
 public:
  template <class T>
  T* add(std::unique_ptr<T> h) {
    T* p = h.get();
    std::lock_guard<std::mutex> lk(mu_);
    live_.emplace(p, std::shared_ptr<void>(std::move(h)));
    return p;
  }
  void remove(const void* p);  // frees it (outside the lock)
  void clear();                // frees every one left

 private:
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards live_
  std::unordered_map<const void*, std::shared_ptr<void>> live_;
};

// Each open file's read-ahead (vfs::OpenFile::choose_readahead_kb), set through the mount's
// sysfs value: the kernel copies the mount's value into a file just after its open is answered.
// Opens are answered one at a time, and one that needs the other value waits until the last open
// answered with the current one is kSettle old, so that its opener has copied it. A heuristic
// (docs/architecture.md says why it stays): an opener descheduled longer gets the other value,
// which costs speed, never bytes.
class PerFileReadahead {
 public:
  // Long enough for an opener to return from open(2) when nothing delays it, sanitizer builds
  // under load included (2 ms let 9 of 30 opens through there).
  static constexpr std::chrono::milliseconds kSettle{5};
  // `set` writes the mount's value in KiB; the mount starts at `now_kb`. Until enabled, opens are
  // answered as they come, with whatever the mount has.
  void enable(unsigned now_kb, std::function<void(unsigned)> set);
  // Answers an open (reply()) with the mount's read-ahead at `kb` (0: any).
  void answer(unsigned kb, const std::function<void()>& reply);

 private:
  // Lock level 5 (docs/architecture.md), a leaf: held while an open is answered (libfuse's reply,
  // no lock of ours). Guards everything below.
  std::mutex mu_;
  std::function<void(unsigned)> set_;
  unsigned now_ = 0;
  std::chrono::steady_clock::time_point used_{};  // the last open answered with now_
};

// Makes the kernel forget the names vfs says changed (vfs::TreeListener): a name added,
// removed or replaced in a revalidated directory (fuse_lowlevel_notify_inval_entry), and the
// directory's attributes and cached listing (fuse_lowlevel_notify_inval_inode). vfs tells it
// while handling a lookup or readdir of that very directory, where libfuse forbids the call (the
// kernel may hold the directory's lock until that request is answered: fuse_lowlevel.h), so the
// names are queued and sent by a thread of its own, which holds no lock of ours while it sends.
class Invalidator final : public vfs::TreeListener {
 public:
  static constexpr size_t kMaxQueued = 100000;  // beyond: dropped (the names expire by themselves)
  ~Invalidator() override { stop(); }
  void names_changed(uint64_t dir_ino, const std::vector<std::string>& names) override;
  // Starts the thread (after daemonizing); stop() ends it after sending what is queued.
  void start(fuse_session* se);
  void stop();
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }

 private:
  void run();
  struct Item {
    uint64_t parent;
    std::string name;  // empty: the directory itself
  };
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards queue_, stop_
  std::condition_variable cv_;
  std::vector<Item> queue_;
  bool stop_ = false;
  fuse_session* se_ = nullptr;
  std::thread thread_;
  std::atomic<uint64_t> sent_{0};
};

// The session's userdata. `vfs` is set before the session loop starts (after daemonizing).
struct Context {
  vfs::Vfs* vfs = nullptr;
  FuseOptions opts;
  std::atomic<bool> initialized{false};  // set when the kernel's INIT request has been handled
  // Called while the kernel's INIT request is handled, before the reply: no other request can
  // arrive before it returns (the mount's read-ahead is raised here, daemon/mount.cpp).
  void (*at_init)(Context&, fuse_conn_info*) = nullptr;
  std::string mountpoint;
  unsigned readahead_kb = 0;  // 0: the kernel's default
  fuse_session* se = nullptr;  // for notify_store (set before the loop starts)
  // What replies can do (spliced: opts.splice and the kernel can, within splice_max_read();
  // pushes: opts.push, through se): set at INIT. vfs decides which a read uses.
  vfs::ReplyMeans means;
  size_t max_read = 0;         // requests' largest size, when capped (daemon/mount.cpp); 0: the kernel's
  PerFileReadahead readahead;  // enabled by daemon/mount.cpp when the daemon can write sysfs
  RepeatedFailures read_failures;
  Handles handles;  // cleared by daemon/mount.cpp when the session loop has ended
  Invalidator invalidator;  // the Vfs's listener; started and stopped by daemon/mount.cpp
  vfs::CacheTimeouts timeouts() const { return {opts.attr_timeout, opts.entry_timeout}; }
};

// libfuse splices a reply only through one pipe that holds all of it and a page per buffer
// more; pipes grow to fs.pipe-max-size at most (1 MiB by default). A larger reply falls back to
// a copy through a buffer libfuse allocates per reply, slower than the daemon's own read. So a
// spliced reply has at most splice_buffers(size) buffers (kSpliceBuffers for a request of the
// cap: a read of frames of several modules is one buffer per module and frame, eight for 128 KiB
// AGIPD module frames), and with splicing on, requests are capped at
// splice_max_read() (a 1 MiB read-ahead window then takes two requests instead of one; the
// splice halves the daemon's CPU per byte: docs/benchmarks.md, "What each mechanism buys").
constexpr size_t kSpliceBuffers = 12;
size_t splice_pipe_max();
size_t splice_max_read();
// The buffers a spliced reply of `size` bytes may have: what the pipe holds beyond the bytes.
size_t splice_buffers(size_t size);

const fuse_lowlevel_ops& operations();

// The errno for an exception (h5d::Error's code; ENOMEM; EIO for anything else); its message,
// whether it was logged where it happened, and its place (Error::place).
int errno_of(std::exception_ptr e, std::string* message, bool* logged = nullptr, Place* place = nullptr);

}  // namespace h5d::fusefs
