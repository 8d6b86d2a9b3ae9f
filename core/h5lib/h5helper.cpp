#include "core/h5lib/h5helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <tuple>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "core/engine/engine.h"
#include "core/log.h"

extern char** environ;

namespace h5d {
namespace {

using Clock = std::chrono::steady_clock;

// A failure of the transport (crash, hang, malformed reply): the helper is killed.
using Broken = HelperProcess::Broken;

bool executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

std::string dir_of_self() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  const auto pos = p.rfind('/');
  return pos == std::string::npos ? "." : p.substr(0, pos);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Whether the stop descriptor (HelperOptions::stop_fd) is readable: the daemon is stopping.
bool stopping(int stop_fd) {
  if (stop_fd < 0) return false;
  struct pollfd p {stop_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

const Broken kStopped{"stopped: the mount is stopping", true};

// Waits for `events` on fd until the deadline; false on timeout. Throws Broken (stopped) when
// the stop descriptor becomes readable first.
bool wait_fd(int fd, short events, Clock::time_point deadline, int stop_fd) {
  for (;;) {
    struct pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int rc = ::poll(p, stop_fd >= 0 ? 2 : 1, remaining_ms(deadline));
    if (rc > 0 && stop_fd >= 0 && (p[1].revents & POLLIN)) throw kStopped;
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

void write_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& timeout_why,
               int stop_fd) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    if (!wait_fd(fd, POLLOUT, deadline, stop_fd)) throw Broken{timeout_why};
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EPIPE || errno == ECONNRESET) throw Broken{"crashed"};  // it is gone
      throw Broken{std::string("request not sent: ") + std::strerror(errno)};
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& timeout_why,
              int stop_fd) {
  char* p = static_cast<char*>(data);
  while (n) {
    if (!wait_fd(fd, POLLIN, deadline, stop_fd)) throw Broken{timeout_why};
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) throw Broken{"crashed"};
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Broken{"crashed"};
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// Blocking transfers for the helper's side (no deadline: the daemon bounds the time). `io` is
// read or send; false at EOF or on an error.
template <class Buf, class Io>
bool transfer_blocking(Buf* data, size_t n, Io io) {
  while (n) {
    const ssize_t r = io(data, n);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

bool detail::read_blocking(int fd, void* data, size_t n) {
  return transfer_blocking(static_cast<char*>(data), n, [fd](char* p, size_t k) { return ::read(fd, p, k); });
}

bool detail::write_blocking(int fd, const void* data, size_t n) {
  return transfer_blocking(static_cast<const char*>(data), n,
                           [fd](const char* p, size_t k) { return ::send(fd, p, k, MSG_NOSIGNAL); });
}

namespace {

// PR_SET_PDEATHSIG (which a helper sets, helper/main.cpp) fires when the *thread* that spawned
// it ends, not the process: libfuse's worker threads come and go (max_idle_threads), and a
// writer process spawned from one would be killed with it, its file's unflushed metadata lost.
// So every helper is spawned from this one thread, which lives as long as the process (never
// joined nor destroyed). Its mutex is a leaf (lock level 5).
class Spawner {
 public:
  static Spawner& get() {
    static Spawner* s = new Spawner;  // never destroyed: its thread must outlive every helper
    return *s;
  }
  // Runs fn on the spawner thread and returns its result (or rethrows its exception).
  void run(const std::function<void()>& fn) {
    std::packaged_task<void()> task(fn);
    auto done = task.get_future();
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(&task);
    }
    cv_.notify_one();
    done.get();
  }

 private:
  Spawner() { std::thread([this] { loop(); }).detach(); }
  [[noreturn]] void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty(); });
      std::packaged_task<void()>* t = queue_.front();
      queue_.pop_front();
      lk.unlock();
      (*t)();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>*> queue_;
};

}  // namespace

std::string find_helper() {
  if (const char* env = std::getenv("H5DIRECT_HELPER")) return executable(env) ? env : "";
  const std::string dir = dir_of_self();
  for (const std::string& c : {dir + "/h5direct-helper", dir + "/../libexec/h5direct/h5direct-helper"}) {
    if (executable(c)) return c;
  }
  return "";
}

void HelperProcess::start(const HelperOptions& opts, Broker* broker, bool writer) {
  if (pid_ > 0) return;
  const std::string& path = opts.path;
  stop_fd_ = opts.stop_fd;
  broker_ = broker;
  report_.clear();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail(EIO, std::string("cannot start the HDF5 helper: socketpair: ") + std::strerror(errno));
  // The child's end becomes its descriptor 3 (dup2 clears close-on-exec); keep it off 3 here.
  int child = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  ::close(sv[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, child, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The daemon's threads block SIGINT/SIGTERM/SIGHUP: the helper starts with none blocked, in its
  // own process group (a terminal's ^C goes to the daemon, which then closes the helpers).
  sigset_t none, def;
  sigemptyset(&none);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGHUP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const std::string parent = std::to_string(::getpid());
  const std::string timeout = std::to_string(opts.timeout_ms);
  std::vector<char*> argv = {const_cast<char*>(path.c_str()),
                             const_cast<char*>("--fd"),
                             const_cast<char*>("3"),
                             const_cast<char*>("--parent"),
                             const_cast<char*>(parent.c_str()),
                             const_cast<char*>("--sandbox"),
                             const_cast<char*>(sandbox_mode_name(opts.sandbox)),
                             const_cast<char*>("--timeout-ms"),
                             const_cast<char*>(timeout.c_str()),
                             writer ? const_cast<char*>("--writer") : nullptr,
                             nullptr};
  pid_t pid = -1;
  int rc = 0;
  Spawner::get().run([&] { rc = ::posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), environ); });
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(child);
  if (rc != 0) {
    ::close(sv[0]);
    fail(EIO, "cannot start the HDF5 helper " + path + ": " + std::strerror(rc));
  }
  pid_ = pid;
  fd_ = sv[0];
}

bool HelperProcess::reap_if_dead() {
  int status = 0;
  if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  ::close(fd_);
  fd_ = -1;
  pid_ = -1;
  return true;
}

void HelperProcess::kill(std::string* how) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    int status = 0;
    // Dead already (killed from outside, say): its own end is named, SIGKILL included.
    const bool dead = ::waitpid(pid_, &status, WNOHANG) == pid_;
    if (!dead) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (how && WIFSIGNALED(status) && (dead || WTERMSIG(status) != SIGKILL)) {
      *how += " (signal " + std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) + ")";
    } else if (how && WIFEXITED(status)) {
      *how += " (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
    }
  }
  pid_ = -1;
}

uint16_t HelperProcess::exchange(proto::Op op, const std::string& body, uint32_t max_reply, unsigned timeout_ms,
                                 std::string& reply, const std::vector<std::string>& files) {
  if (fd_ < 0) throw Broken{"is not running"};
  if (stopping(stop_fd_)) throw kStopped;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string timeout_why = "timed out after " + std::to_string(timeout_ms) + " ms";
  proto::Header h;
  h.kind = static_cast<uint16_t>(op);
  h.seq = ++seq_;
  h.length = static_cast<uint32_t>(body.size());
  uint8_t hb[proto::kHeaderSize];
  proto::encode_header(h, hb);
  write_all(fd_, hb, sizeof hb, deadline, timeout_why, stop_fd_);
  write_all(fd_, body.data(), body.size(), deadline, timeout_why, stop_fd_);
  // The helper's own messages (asks for files, its sandbox report, a refused call) come first.
  for (;;) {
    read_all(fd_, hb, sizeof hb, deadline, timeout_why, stop_fd_);
    proto::Header rh;
    try {
      rh = proto::decode_header(hb, std::max(max_reply, proto::kMaxBrokerMessage));
    } catch (const Error& e) {
      throw Broken{std::string("sent a bad reply: ") + e.what()};
    }
    if (rh.kind == proto::kBrokerOpen || rh.kind == proto::kBrokerStat || rh.kind == proto::kSandboxReport ||
        rh.kind == proto::kRefusedCall) {
      if (rh.length > proto::kMaxBrokerMessage) throw Broken{"sent a bad message: too long"};
      std::string msg(rh.length, '\0');
      read_all(fd_, msg.data(), msg.size(), deadline, timeout_why, stop_fd_);
      if (rh.kind == proto::kBrokerOpen || rh.kind == proto::kBrokerStat) {
        answer_broker(rh.kind, msg, files, deadline);
        continue;
      }
      try {
        proto::In in(msg);
        if (rh.kind == proto::kSandboxReport) {
          report_ = in.str();
          in.end();
          continue;
        }
        const uint32_t nr = in.u32();
        throw Broken{"made a system call its sandbox refuses (" + syscall_name(nr) + ")"};
      } catch (const Error& e) {
        throw Broken{std::string("sent a bad message: ") + e.what()};
      }
    }
    if (rh.length > max_reply) throw Broken{"sent a bad reply: longer than " + std::to_string(max_reply) + " bytes"};
    if (rh.seq != h.seq || (rh.kind != proto::kReplyOk && rh.kind != proto::kReplyError))
      throw Broken{"sent a bad reply: wrong sequence number or kind"};
    reply.resize(rh.length);
    read_all(fd_, reply.data(), reply.size(), deadline, timeout_why, stop_fd_);
    return rh.kind;
  }
}

void HelperProcess::answer_broker(uint16_t kind, const std::string& msg, const std::vector<std::string>& files,
                                  Clock::time_point deadline) {
  const bool open = kind == proto::kBrokerOpen;
  std::string path;
  uint32_t flags = 0, mode = 0;
  try {
    proto::In in(msg);
    path = in.str();
    flags = in.u32();
    if (open) mode = in.u32();
    in.end();
  } catch (const Error& e) {
    throw Broken{std::string("sent a bad message: ") + e.what()};
  }
  BrokerAnswer a;
  if (!broker_) {
    a.error = EACCES;
    a.refusal = "this process has no broker";
  } else if (open) {
    a = broker_->open(path, static_cast<int>(flags), mode, files);
  } else {
    a = broker_->stat(path, !(flags & proto::kStatNoFollow), files);
  }
  if (!a.refusal.empty() && (!broker_ || broker_->should_log(path))) {
    log::warn((files.empty() ? std::string("a helper") : files.front() + ": its helper") + " (pid " +
              std::to_string(pid_) + ") asked to " + (open ? "open " : "look up ") + path + ": refused, " +
              a.refusal);
  }
  const bool ok = open ? a.fd >= 0 : a.error == 0;
  proto::Out o;
  o.u32(ok ? 0u : static_cast<uint32_t>(a.error ? a.error : EACCES));
  // The file's status goes with its descriptor too: a helper running as another uid may be
  // refused fstat() on a file of a FUSE source mounted without allow_other (libhdf5 needs its size).
  if (ok) o.bytes(&a.st, sizeof a.st);
  proto::Header h;
  h.kind = proto::kBrokerAnswer;
  h.length = static_cast<uint32_t>(o.data().size());
  uint8_t hb[proto::kHeaderSize];
  proto::encode_header(h, hb);
  std::string out(reinterpret_cast<const char*>(hb), sizeof hb);
  out += o.data();
  // One sendmsg: the descriptor travels with the message's first byte.
  struct iovec iov {out.data(), out.size()};
  struct msghdr m {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  if (a.fd >= 0) {
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    struct cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &a.fd, sizeof(int));
  }
  ssize_t sent;
  do {
    if (!wait_fd(fd_, POLLOUT, deadline, stop_fd_)) {
      if (a.fd >= 0) ::close(a.fd);
      throw Broken{"timed out"};
    }
    sent = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && (errno == EINTR || errno == EAGAIN));
  if (a.fd >= 0) ::close(a.fd);
  if (sent < 0) throw Broken{"crashed"};
  if (static_cast<size_t>(sent) < out.size())
    write_all(fd_, out.data() + sent, out.size() - static_cast<size_t>(sent), deadline, "timed out", stop_fd_);
}

void throw_reply_error(const std::string& reply, const std::string& what, const Place& place) {
  proto::In in(reply);
  int code = EIO;
  std::string msg;
  try {
    code = static_cast<int>(in.u32());
    msg = in.str();
    in.end();
  } catch (const Error&) {
    msg = what + ": malformed error reply from the HDF5 helper";
  }
  if (code <= 0 || code > 4095) code = EIO;
  throw Error(code, msg, false, place);
}

HelperPool::HelperPool(HelperOptions opts)
    : opts_(std::move(opts)), broker_(opts_.roots), slots_(std::max(1u, opts_.count)) {}

std::string HelperPool::sandbox() const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!report_.empty()) return report_;
  }
  return describe(plan_sandbox(probe_kernel(), opts_.sandbox));
}

HelperPool::~HelperPool() = default;  // each slot's HelperProcess kills its helper

uint64_t HelperPool::requests() const {
  std::lock_guard<std::mutex> lk(mu_);
  return requests_;
}

uint64_t HelperPool::failures() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failures_;
}

size_t HelperPool::preferred(const std::string& file) const { return std::hash<std::string>()(file) % slots_.size(); }

size_t HelperPool::acquire(const std::string& file) {
  std::unique_lock<std::mutex> lk(mu_);
  // Requests for one file prefer one helper (its open file and metadata are cached there), but
  // take any idle one rather than wait behind a slow request.
  const size_t pref = preferred(file);
  for (;;) {
    if (!slots_[pref].busy) {
      slots_[pref].busy = true;
      ++requests_;
      count_file_locked(file);
      return pref;
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].busy) {
        slots_[i].busy = true;
        ++requests_;
        count_file_locked(file);
        return i;
      }
    }
    cv_.wait(lk);
  }
}

void HelperPool::release(size_t i) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    slots_[i].busy = false;
  }
  cv_.notify_one();
}

void HelperPool::check_bad(const std::string& file) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = bad_.find(file);
  if (it == bad_.end()) return;
  struct stat st;
  const bool changed = ::stat(file.c_str(), &st) != 0 || identity_of(st) != it->second.id;
  if (changed || Clock::now() >= it->second.retry_at) return;  // retried (kept for the backoff)
  // Logged once, when the helper failed; each request skipped since is not logged again.
  throw Error(EIO,
              file + ": skipped, marked bad after the HDF5 helper " + it->second.why + " (retried " +
                  std::to_string(remaining_ms(it->second.retry_at) / 1000 + 1) + " s from now or when the file changes)",
              true);
}

void HelperPool::mark_bad(const std::string& file, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  ++failures_;
  Bad& b = bad_[file];
  struct stat st;
  FileIdentity id;
  if (::stat(file.c_str(), &st) == 0) id = identity_of(st);
  b.backoff_ms = (b.backoff_ms && b.id == id) ? std::min(b.backoff_ms * 2, opts_.backoff_ms * 16) : opts_.backoff_ms;
  b.id = id;
  b.retry_at = Clock::now() + std::chrono::milliseconds(b.backoff_ms);
  b.why = why;
}

bool HelperPool::marked_bad(const std::string& file) {
  try {
    check_bad(file);
  } catch (const Error&) {
    return true;
  }
  return false;
}

void HelperPool::start_idle() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (slots_[i].busy) continue;
      slots_[i].busy = true;
    }
    try {
      slots_[i].proc.reap_if_dead();
      slots_[i].proc.start(opts_, &broker_);
    } catch (const std::exception& e) {
      log::warn(std::string("HDF5 helper not started ahead: ") + e.what());
    }
    release(i);
  }
}

std::string HelperPool::call(proto::Op op, const std::string& file, const std::string& object,
                             const std::string& body, uint32_t max_reply) {
  check_bad(file);
  return request(op, {file}, object, body, max_reply, true);
}

std::string HelperPool::call_tentative(proto::Op op, const std::string& file, const std::string& object,
                                       const std::string& body, uint32_t max_reply) {
  check_bad(file);
  return request(op, {file}, object, body, max_reply, false);
}

std::string HelperPool::call_batch(proto::Op op, const std::vector<std::string>& files, const std::string& body,
                                   uint32_t max_reply) {
  if (files.empty()) fail(EINVAL, "an HDF5 helper batch about no file");
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 1; i < files.size(); ++i) count_file_locked(files[i]);  // the first: by acquire
  }
  return request(op, files, "(a batch)", body, max_reply, false);
}

void HelperPool::note_report(const std::string& report) {
  if (report.empty()) return;
  std::string planned;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (report == report_) return;
    const bool first = report_.empty();
    report_ = report;
    if (!first) return;
    planned = describe(plan_sandbox(probe_kernel(), opts_.sandbox));
  }
  if (report != planned) log::warn("sandbox: the helpers hold " + report + " (this kernel allows: " + planned + ")");
}

void HelperPool::count_file_locked(const std::string& file) {
  if (files_asked_.size() < kMaxFilesCounted) files_asked_.insert(file);
}

uint64_t HelperPool::files_asked() const {
  std::lock_guard<std::mutex> lk(mu_);
  return files_asked_.size();
}

std::string HelperPool::request(proto::Op op, const std::vector<std::string>& files, const std::string& object,
                                const std::string& body, uint32_t max_reply, bool blame) {
  const std::string& file = files.front();
  if (body.size() > proto::kMaxRequest) fail(EINVAL, file + ":" + object + ": request too large");
  if (stopping(opts_.stop_fd)) throw Error(EIO, file + ":" + object + ": the mount is stopping", true);
  const size_t i = acquire(file);
  HelperProcess& p = slots_[i].proc;  // ours until release(i)
  std::string reply;
  uint16_t kind = 0;
  try {
    // A helper that died while idle (killed from outside, say) is restarted, not blamed on
    // this request's file.
    p.reap_if_dead();
    p.start(opts_, &broker_);
    kind = p.exchange(op, body, max_reply, opts_.timeout_ms, reply, files);
    note_report(p.sandbox_report());
  } catch (const HelperProcess::Broken& b) {
    std::string how = b.why;
    p.kill(&how);
    release(i);
    if (b.stopped) {
      log::debug(file + ":" + object + ": " + proto::op_name(op) + " ended: the mount is stopping");
      throw Error(EIO, file + ":" + object + ": the mount is stopping", true);
    }
    if (!blame) {
      log::debug(file + ":" + object + ": HDF5 helper " + how + " in " + proto::op_name(op) +
                 "; helper restarted, the parts are asked one by one");
      throw HelperFailure(file + ":" + object + ": HDF5 helper " + how + " in " + proto::op_name(op), how);
    }
    mark_bad(file, how + " in " + proto::op_name(op));
    const std::string msg = file + ":" + object + ": HDF5 helper " + how + " in " + proto::op_name(op) +
                            "; helper restarted, file marked bad for " +
                            std::to_string(opts_.backoff_ms / 1000) + " s or until it changes";
    const Place place{file, object, ""};
    log::report(log::Level::Error, EIO, place, msg);
    throw Error(EIO, msg, true, place);  // this line is its one log line
  } catch (...) {
    p.kill(nullptr);
    release(i);
    throw;
  }
  release(i);
  if (kind == proto::kReplyError) throw_reply_error(reply, file + ":" + object, Place{file, object, ""});
  return reply;
}

}  // namespace h5d
