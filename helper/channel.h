// Side: helper. The helper's end of its socket to the daemon (descriptor 3): requests in, replies
// out, and, while a request is served, the helper's own messages: asks for files (the broker,
// core/h5lib/broker.h), its sandbox report, a refused system call. Everything sent goes out
// whole under one lock, so threads of the helper (and its SIGSYS handler) never interleave.
#pragma once
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/h5lib/h5proto.h"

namespace h5d::helper {

class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  int fd() const { return fd_; }
  // The next request (blocking); false when the daemon closed its end or sent no message of ours.
  bool read_request(proto::Header& h, std::string& body);
  // A whole message; false when the daemon is gone.
  bool send(uint16_t kind, uint32_t seq, const std::string& body);
  // Asks the daemon to open `path` (absolute) with `flags` and `mode`: the descriptor, or -1 with
  // errno set (the daemon's refusal, or EIO when it answered nothing usable). The status the
  // daemon saw goes to opened_status().
  int open(const std::string& path, int flags, unsigned mode);
  // The status of descriptor `fd` as the daemon saw it when it opened it for this helper; false
  // when `fd` is none it opened. For fstat() where the kernel refuses it to the helper's uid (a
  // file of a FUSE source mounted without allow_other).
  bool opened_status(int fd, struct stat* st);
  // Asks the daemon for the status of `path` (absolute; lstat's when `follow` is false): 0, or -1
  // with errno set. A path is asked about once per request (new_request): libhdf5 and the
  // helper's own checks look the request's file up a dozen times while they serve it (a run's
  // listing made 17 lookups per request, each a round trip to the daemon).
  int stat(const std::string& path, bool follow, struct stat* st);
  // A request begins: what was looked up for the last one is forgotten.
  void new_request();
  // From a signal handler: sends kRefusedCall with the call's number when the socket is free.
  // Async-signal-safe (no allocation, no lock that could be held by the interrupted thread).
  void send_refused_call(uint32_t nr);

 private:
  void lock();
  void unlock() { busy_.clear(std::memory_order_release); }
  bool send_locked(const void* p, size_t n);
  int ask_stat(const std::string& path, bool follow, struct stat* st);
  // One ask (kBrokerOpen or kBrokerStat, its body) and its answer: the errno it carries (EIO when
  // none came), the descriptor attached (or -1) and the answer's body after the errno.
  uint32_t ask(uint16_t kind, const std::string& body, int& fd, std::string& rest);

  int fd_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::mutex opened_mu_;  // guards opened_, looked_up_
  std::unordered_map<int, struct stat> opened_;  // descriptor -> its status when opened
  struct Lookup {
    uint32_t error = 0;
    struct stat st {};
  };
  std::unordered_map<std::string, Lookup> looked_up_;  // this request's lookups, by follow flag + path  // a spin lock: held for one message and its answer
};

// The process's channel, once the helper serves (nullptr before): what the helper's own opens
// (helper/libc_open.cpp) ask once it is sandboxed.
Channel* channel();
void set_channel(Channel* c);
// Whether opens go to the daemon: true once the sandbox is entered (helper/sandbox.h).
bool opens_brokered();
void set_opens_brokered(bool on);

}  // namespace h5d::helper
