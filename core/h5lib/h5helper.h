// The process boundary around libhdf5. libhdf5 is not hardened against malformed files (a
// damaged attribute, a bad datatype or a looping filter can crash or hang it, and a stuck call
// holds its global lock), so in the daemon every libhdf5 call on a source file runs in a helper
// process (h5direct-helper, a small pool of them), never in the daemon itself:
//
//   daemon: H5File / euxfel::meta / LibraryArray  --request-->  helper: the same functions,
//           (Engine::helpers() != nullptr)        <--reply----  in process (helpers() == nullptr)
//
// A helper that crashes, aborts, sends a malformed reply or takes longer than the timeout is
// killed and restarted; the request that needed it gets Error(EIO) with one log line naming the
// file and the call, and the file is marked bad: its requests fail at once until a backoff has
// passed or the file changes (size, mtime, inode). Data reads (pread + decode) stay in the
// daemon: only metadata and LibraryArray's H5Dread cross the boundary (h5proto.h).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/fd_cache.h"
#include "core/h5lib/h5proto.h"

namespace h5d {

class Engine;

struct HelperOptions {
  std::string path;                 // the helper executable; "" = libhdf5 in process (no isolation)
  unsigned count = 2;               // helper processes
  unsigned timeout_ms = 30000;      // one request; a helper that takes longer is killed
  unsigned backoff_ms = 30000;      // a bad file is retried after this (doubling, at most 16x)
};

// The helper beside the running program: $H5DIRECT_HELPER when set (tests), else
// <dir of /proc/self/exe>/h5direct-helper, else <dir>/../libexec/h5direct/h5direct-helper.
// "" when none is found.
std::string find_helper();

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

  // Counters (stats.json).
  uint64_t requests() const;
  uint64_t failures() const;

 private:
  struct Slot {
    pid_t pid = -1;
    int fd = -1;
    bool busy = false;
    uint32_t seq = 0;
  };
  struct Bad {
    FileIdentity id;
    std::chrono::steady_clock::time_point retry_at;
    unsigned backoff_ms = 0;
    std::string why;
  };
  size_t acquire(const std::string& file);
  void release(size_t i);
  void spawn(Slot& s);
  void kill_slot(Slot& s, std::string* how);
  void check_bad(const std::string& file);
  void mark_bad(const std::string& file, const std::string& why);

  HelperOptions opts_;
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards slots_' busy flags, bad_, counters
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::map<std::string, Bad> bad_;
  uint64_t requests_ = 0, failures_ = 0;
};

namespace helper {

// The helper's side: answers requests on `fd` with the in-process implementation (an Engine
// without helpers) until the daemon closes it. Returns the exit status.
int serve(int fd);

// Typed call: encodes file + args, decodes the reply as R (and checks nothing is left over).
template <class R, class... A>
R call(HelperPool& pool, proto::Op op, const std::string& file, const std::string& object,
       const A&... args) {
  proto::Out o;
  proto::put(o, file);
  (proto::put(o, args), ...);
  const std::string reply = pool.call(op, file, object, o.data(),
                                     op == proto::Op::LibraryRead ? proto::kMaxDataReply : proto::kMaxMetaReply);
  proto::In in(reply);
  R r;
  try {
    proto::get(in, r);
    in.end();
  } catch (const Error& e) {
    fail(EIO, file + ":" + object + ": " + proto::op_name(op) + ": " + e.what());
  }
  return r;
}

}  // namespace helper
}  // namespace h5d
