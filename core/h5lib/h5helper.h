// The process boundary around libhdf5. libhdf5 is not hardened against malformed files (a
// damaged attribute, a bad datatype or a looping filter can crash or hang it, and a stuck call
// holds its global lock), so in the daemon every libhdf5 call on a source file runs in a helper
// process (h5direct-helper, a small pool of them), never in the daemon itself:
//
//   daemon: RemoteMetadata (metadata.h)  --request-->  helper: LocalMetadata (h5local.h),
//           H5File / euxfel::meta / LibraryArray  <--reply----  libhdf5 in process (h5serve.cpp)
//           ask it
//
// A helper that crashes, aborts, sends a malformed reply or takes longer than the timeout is
// killed and restarted; the request that needed it gets Error(EIO) with one log line naming the
// file and the call, and the file is marked bad: its requests fail at once until a backoff has
// passed or the file changes (size, mtime, inode). Data reads (pread + decode) stay in the
// daemon: only metadata and LibraryArray's H5Dread cross the boundary (h5proto.h).
//
// Writes cross it too, through the same HelperProcess: each file created by core/write/
// has a writer process of its own (the same executable, proto::is_write_op requests), which is
// not restarted when it fails: that file's later calls fail with Error(EIO).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/engine/fd_cache.h"
#include "core/h5lib/broker.h"
#include "core/h5lib/h5proto.h"
#include "core/h5lib/sandbox_plan.h"

namespace h5d {

class Engine;

struct HelperOptions {
  std::string path;                 // the helper executable; "" = libhdf5 in process (no isolation)
  unsigned count = 2;               // helper processes
  unsigned timeout_ms = 30000;      // one request; a helper that takes longer is killed
  unsigned backoff_ms = 30000;      // a bad file is retried after this (doubling, at most 16x)
  SandboxMode sandbox = SandboxMode::All;  // -o sandbox= (sandbox_plan.h)
  // Where the files a read helper may open lie (the mount's source; broker.h): none in tools and
  // tests without a mount, whose helpers may open the files they are asked about.
  std::vector<std::string> roots;
  // Readable once the daemon stops (-1: never): a request waiting on a read helper ends at once
  // with EIO, and no read helper is started again (the mount then ends within the FUSE loop's
  // time, not a timeout's). The daemon's signal handler writes to it.
  int stop_fd = -1;
};

// The helper beside the running program: $H5DIRECT_HELPER when set (tests), else
// <dir of /proc/self/exe>/h5direct-helper, else <dir>/../libexec/h5direct/h5direct-helper.
// "" when none is found.
std::string find_helper();

// One helper process and its end of the socketpair: the pool's slots and a written file's
// writer process (core/write/remote_file.cpp) both use it, so spawning, the deadline of a request and
// killing live here once. Not thread-safe: its owner serializes requests.
class HelperProcess {
 public:
  HelperProcess() = default;
  ~HelperProcess() { kill(nullptr); }
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Starts the helper executable (posix_spawn, never fork) when not running, sandboxed as `opts`
  // says (its sandbox, the stop descriptor); Error(EIO) when it cannot. `broker` answers the
  // files it asks for (broker.h; nullptr: every ask is refused); it must outlive the process.
  // `writer`: a written file's writer process (its sandbox lets it write that file).
  void start(const HelperOptions& opts, Broker* broker, bool writer = false);
  // A process that died while idle (killed from outside) is reaped; true when it had died.
  bool reap_if_dead();
  // SIGKILL and reap; `how` (if given) gets " (signal N, ...)" / " (exit status N)" appended.
  void kill(std::string* how);
  // One request and its reply (at most max_reply bytes) within timeout_ms. Meanwhile the
  // helper's asks for files are answered (the broker, for a request about `files`) and its
  // sandbox report kept. A crash, hang, malformed reply, refused system call or the stop
  // descriptor throws Broken (the caller kills the process); a kReplyError reply comes back as
  // is (kind kReplyError, see throw_reply_error).
  struct Broken {
    std::string why;
    bool stopped = false;  // the daemon is stopping: nobody's fault
  };
  uint16_t exchange(proto::Op op, const std::string& body, uint32_t max_reply, unsigned timeout_ms,
                    std::string& reply, const std::vector<std::string>& files);
  // What the helper said its sandbox holds (describe(); "" until it said).
  const std::string& sandbox_report() const { return report_; }

 private:
  void answer_broker(uint16_t kind, const std::string& body, const std::vector<std::string>& files,
                     std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int fd_ = -1;
  int stop_fd_ = -1;
  Broker* broker_ = nullptr;
  uint32_t seq_ = 0;
  std::string report_;
};

// The Error a kReplyError body carries (errno, message), at `place`; `what` names the call when
// the body is malformed.
[[noreturn]] void throw_reply_error(const std::string& reply, const std::string& what, const Place& place = {});
// A helper that broke (crashed, hung, sent a malformed reply) in a call that blames no file
// (HelperPool::call_tentative, call_batch): the caller asks for the parts one by one. `how`:
// "crashed (signal 11, Segmentation fault)", "timed out after N ms"...
class HelperFailure : public Error {
 public:
  HelperFailure(const std::string& msg, std::string how_) : Error(EIO, msg, true), how(std::move(how_)) {}
  std::string how;
};

class HelperPool {
 public:
  explicit HelperPool(HelperOptions opts);
  ~HelperPool();  // kills the helpers
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  // One request about `file` (`object`: the path inside it, for the log line). Returns the
  // reply body (at most max_reply bytes). The helper's own errors come back as Error(code,
  // message); a crash, hang or malformed reply as Error(EIO) (logged once); a file marked bad
  // fails with Error(EIO) without asking.
  std::string call(proto::Op op, const std::string& file, const std::string& object,
                   const std::string& body, uint32_t max_reply);
  // call() for a request whose parts the caller can ask for one by one (an object's
  // attributes, a dataset's details): a crash, hang or malformed reply restarts the helper and
  // throws HelperFailure, without logging or marking the file bad; the parts' own requests
  // then find the culprit. A file marked bad fails at once, as in call().
  std::string call_tentative(proto::Op op, const std::string& file, const std::string& object,
                             const std::string& body, uint32_t max_reply);
  // One request about several files (a batch: proto::Op::DatasetInfos), sent to the helper
  // `first_file` prefers. A crash, hang or malformed reply restarts the helper and throws
  // Error(EIO) without logging or marking a file bad: the batch only saves round trips, and
  // the caller's requests file by file then find and name the file responsible.
  // `files`: every file the batch is about (counted by files_asked), the first one chooses.
  std::string call_batch(proto::Op op, const std::vector<std::string>& files, const std::string& body,
                         uint32_t max_reply);
  // Whether `file` is marked bad now (its requests would fail at once): left out of batches.
  bool marked_bad(const std::string& file);
  // Starts every idle helper that is not running (a mount calls it once its loop can start):
  // a helper's start (exec, loading libhdf5) then overlaps the first requests instead of
  // delaying the first access after a mount (docs/benchmarks.md, "What each mechanism buys"). Not a
  // request; a helper that cannot start is logged and started again by the next request for it.
  void start_idle();

  const HelperOptions& options() const { return opts_; }
  // What the helpers' sandbox holds: the latest helper's report (describe()), or the plan for
  // this kernel until a helper has reported.
  std::string sandbox() const;
  const SourceBroker& broker() const { return broker_; }
  // The helper a file's requests go to when it is idle (its open file and metadata are cached
  // there): callers that spread many files' requests over the helpers split them by it.
  size_t preferred(const std::string& file) const;

  // Counters (stats.json).
  uint64_t requests() const;
  uint64_t failures() const;
  // Distinct files the helpers were asked about (opened there), counted up to kMaxFilesCounted.
  uint64_t files_asked() const;
  static constexpr size_t kMaxFilesCounted = size_t{1} << 20;

 private:
  struct Slot {
    HelperProcess proc;
    bool busy = false;
  };
  struct Bad {
    FileIdentity id;
    std::chrono::steady_clock::time_point retry_at;
    unsigned backoff_ms = 0;
    std::string why;
  };
  // call and call_batch: `blame` marks the file bad and logs when the helper breaks.
  std::string request(proto::Op op, const std::vector<std::string>& files, const std::string& object,
                      const std::string& body, uint32_t max_reply, bool blame);
  size_t acquire(const std::string& file);
  void release(size_t i);
  void check_bad(const std::string& file);
  void mark_bad(const std::string& file, const std::string& why);

  HelperOptions opts_;
  SourceBroker broker_;
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards slots_' busy flags, bad_, counters, report_
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::map<std::string, Bad> bad_;
  uint64_t requests_ = 0, failures_ = 0;
  std::string report_;  // the latest helper's sandbox report
  std::unordered_set<std::string> files_asked_;  // at most kMaxFilesCounted
  void count_file_locked(const std::string& file);
  // Keeps a helper's sandbox report; logs once when it holds less than this kernel allows.
  void note_report(const std::string& report);
};

namespace detail {
// Blocking read / send of exactly n bytes on the helper's socket; false at EOF or on an error.
bool read_blocking(int fd, void* data, size_t n);
bool write_blocking(int fd, const void* data, size_t n);
}  // namespace detail

namespace helper {

// Typed call: encodes file + args, decodes the reply as R (and checks nothing is left over).
// `tentative`: HelperPool::call_tentative (HelperFailure when the helper breaks).
template <class R, class... A>
R call_as(bool tentative, HelperPool& pool, proto::Op op, const std::string& file, const std::string& object,
          const A&... args) {
  proto::Out o;
  proto::put(o, file);
  (proto::put(o, args), ...);
  const uint32_t max = op == proto::Op::LibraryRead ? proto::kMaxDataReply : proto::kMaxMetaReply;
  const std::string reply = tentative ? pool.call_tentative(op, file, object, o.data(), max)
                                      : pool.call(op, file, object, o.data(), max);
  try {
    return proto::decode_all<R>(reply);
  } catch (const Error& e) {
    fail(EIO, file + ":" + object + ": " + proto::op_name(op) + ": " + e.what());
  }
}

template <class R, class... A>
R call(HelperPool& pool, proto::Op op, const std::string& file, const std::string& object, const A&... args) {
  return call_as<R>(false, pool, op, file, object, args...);
}

template <class R, class... A>
R call_tentative(HelperPool& pool, proto::Op op, const std::string& file, const std::string& object,
                 const A&... args) {
  return call_as<R>(true, pool, op, file, object, args...);
}

}  // namespace helper
}  // namespace h5d
