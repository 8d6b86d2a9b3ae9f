// Side: helper. The helper's socket to the daemon (channel.h).
#include "helper/channel.h"

#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/h5lib/h5helper.h"

namespace h5d::helper {
namespace {
std::atomic<Channel*> g_channel{nullptr};
std::atomic<bool> g_brokered{false};
}  // namespace

Channel* channel() { return g_channel.load(std::memory_order_acquire); }
void set_channel(Channel* c) { g_channel.store(c, std::memory_order_release); }
bool opens_brokered() { return g_brokered.load(std::memory_order_acquire); }
void set_opens_brokered(bool on) { g_brokered.store(on, std::memory_order_release); }

void Channel::lock() {
  while (busy_.test_and_set(std::memory_order_acquire)) ::sched_yield();
}

bool Channel::send_locked(const void* p, size_t n) { return detail::write_blocking(fd_, p, n); }

bool Channel::read_request(proto::Header& h, std::string& body) {
  uint8_t hb[proto::kHeaderSize];
  if (!detail::read_blocking(fd_, hb, sizeof hb)) return false;
  try {
    h = proto::decode_header(hb, proto::kMaxWriteRequest);  // each request is held to its own limit by serve
  } catch (const std::exception&) {
    return false;  // not our daemon, or out of step: the daemon restarts us
  }
  body.assign(h.length, '\0');
  return detail::read_blocking(fd_, body.data(), body.size());
}

bool Channel::send(uint16_t kind, uint32_t seq, const std::string& body) {
  proto::Header h;
  h.kind = kind;
  h.seq = seq;
  h.length = static_cast<uint32_t>(body.size());
  uint8_t hb[proto::kHeaderSize];
  proto::encode_header(h, hb);
  lock();
  const bool ok = send_locked(hb, sizeof hb) && send_locked(body.data(), body.size());
  unlock();
  return ok;
}

namespace {
// The struct stat an answer carries after its errno.
bool status_of(const std::string& rest, struct stat* st) {
  try {
    proto::In in(rest);
    if (in.u64() != sizeof *st) return false;
    in.raw(st, sizeof *st);
    in.end();
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

uint32_t Channel::ask(uint16_t kind, const std::string& body, int& fd, std::string& rest) {
  fd = -1;
  if (body.size() > proto::kMaxBrokerMessage) return ENAMETOOLONG;
  proto::Header h;
  h.kind = kind;
  h.length = static_cast<uint32_t>(body.size());
  uint8_t hb[proto::kHeaderSize];
  proto::encode_header(h, hb);
  lock();
  if (!send_locked(hb, sizeof hb) || !send_locked(body.data(), body.size())) {
    unlock();
    return EIO;
  }
  // The answer's header carries the descriptor (SCM_RIGHTS) with its first byte.
  struct iovec iov {hb, sizeof hb};
  struct msghdr m {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ssize_t n;
  do {
    n = ::recvmsg(fd_, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (struct cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&m) : nullptr; c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
  }
  // The rest of a short read (a stream may deliver the answer in pieces), then the body.
  bool whole = n > 0 && (static_cast<size_t>(n) == sizeof hb ||
                         detail::read_blocking(fd_, hb + n, sizeof hb - static_cast<size_t>(n)));
  proto::Header ah;
  std::string answer;
  try {
    if (!whole) throw Error(EIO, "no answer");
    ah = proto::decode_header(hb, proto::kMaxBrokerMessage);
    answer.assign(ah.length, '\0');
    whole = detail::read_blocking(fd_, answer.data(), answer.size());
  } catch (const Error&) {
    whole = false;
  }
  unlock();
  uint32_t error = EIO;
  try {
    if (!whole || ah.kind != proto::kBrokerAnswer) throw Error(EIO, "not an answer");
    proto::In in(answer);
    error = in.u32();
    rest.assign(answer, 4, std::string::npos);
  } catch (const Error&) {
    error = EIO;
  }
  if (error == 0 && fd < 0 && kind == proto::kBrokerOpen) error = EIO;
  if (error != 0 && fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  return error;
}

int Channel::open(const std::string& path, int flags, unsigned mode) {
  proto::Out o;
  o.str(path);
  o.u32(static_cast<uint32_t>(flags));
  o.u32(mode);
  int fd = -1;
  std::string rest;
  const uint32_t error = ask(proto::kBrokerOpen, o.data(), fd, rest);
  if (error == 0) {
    struct stat st;
    if (status_of(rest, &st)) {
      std::lock_guard<std::mutex> lk(opened_mu_);
      opened_[fd] = st;
    }
    return fd;
  }
  errno = error > 4095 ? EIO : static_cast<int>(error);
  return -1;
}

bool Channel::opened_status(int fd, struct stat* st) {
  std::lock_guard<std::mutex> lk(opened_mu_);
  auto it = opened_.find(fd);
  if (it == opened_.end()) return false;
  *st = it->second;
  return true;
}

void Channel::new_request() {
  std::lock_guard<std::mutex> lk(opened_mu_);
  looked_up_.clear();
}

int Channel::stat(const std::string& path, bool follow, struct stat* st) {
  const std::string key = (follow ? "F" : "L") + path;
  {
    std::lock_guard<std::mutex> lk(opened_mu_);
    auto it = looked_up_.find(key);
    if (it != looked_up_.end()) {
      if (it->second.error == 0) {
        *st = it->second.st;
        return 0;
      }
      errno = static_cast<int>(it->second.error);
      return -1;
    }
  }
  const int rc = ask_stat(path, follow, st);
  Lookup l;
  l.error = rc == 0 ? 0 : static_cast<uint32_t>(errno);
  if (rc == 0) l.st = *st;
  std::lock_guard<std::mutex> lk(opened_mu_);
  looked_up_[key] = l;
  return rc;
}

int Channel::ask_stat(const std::string& path, bool follow, struct stat* st) {
  proto::Out o;
  o.str(path);
  o.u32(follow ? 0u : proto::kStatNoFollow);
  int fd = -1;
  std::string rest;
  uint32_t error = ask(proto::kBrokerStat, o.data(), fd, rest);
  if (fd >= 0) ::close(fd);  // a stat's answer carries none
  if (error == 0) {
    if (status_of(rest, st)) return 0;
    error = EIO;
  }
  errno = error > 4095 ? EIO : static_cast<int>(error);
  return -1;
}

void Channel::send_refused_call(uint32_t nr) {
  if (busy_.test_and_set(std::memory_order_acquire)) return;  // mid-message: the death says enough
  uint8_t msg[proto::kHeaderSize + 4];
  proto::Header h;
  h.kind = proto::kRefusedCall;
  h.length = 4;
  proto::encode_header(h, msg);
  std::memcpy(msg + proto::kHeaderSize, &nr, 4);
  (void)!::send(fd_, msg, sizeof msg, MSG_NOSIGNAL);
  unlock();
}

}  // namespace h5d::helper
