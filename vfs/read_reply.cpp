// The answer to one read (read_reply.h) and Vfs::answer_read, which decides it.
#include "vfs/read_reply.h"

#include <algorithm>
#include <exception>
#include <string>

#include "core/log.h"
#include "vfs/kernel_policy.h"
#include "vfs/vfs.h"

namespace h5d::vfs {

void ReadsInFlight::add(uint64_t ino, uint64_t off, uint64_t end) {
  std::lock_guard<std::mutex> lk(mu_);
  reads_.push_back({ino, off, end});
}

void ReadsInFlight::remove(uint64_t ino, uint64_t off, uint64_t end) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < reads_.size(); ++i) {
    if (reads_[i].ino == ino && reads_[i].off == off && reads_[i].end == end) {
      reads_[i] = reads_.back();
      reads_.pop_back();
      return;
    }
  }
}

uint64_t ReadsInFlight::clip(uint64_t ino, uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const R& r : reads_) {
    if (r.ino != ino || r.end <= from || r.off >= to) continue;
    to = std::max(from, std::min(to, r.off));
  }
  return to;
}

std::vector<char> PushBuffers::take() {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_.empty()) return {};
  std::vector<char> b = std::move(free_.back());
  free_.pop_back();
  return b;
}

void PushBuffers::give(std::vector<char>&& b) {
  if (b.capacity() == 0 || b.capacity() > kKeepBytes) return;
  b.clear();
  std::lock_guard<std::mutex> lk(mu_);
  if (free_.size() < kKeep) free_.push_back(std::move(b));
}

ReadReply::ReadReply(Shared& shared, OpenFile& file, uint64_t ino, uint64_t off, uint64_t end)
    : shared_(&shared), file_(&file), ino_(ino), off_(off), end_(end) {
  shared_->reads.add(ino_, off_, end_);
}

ReadReply::ReadReply(ReadReply&& o) noexcept
    : shared_(o.shared_),
      file_(o.file_),
      ino_(o.ino_),
      off_(o.off_),
      end_(o.end_),
      spliced_(o.spliced_),
      splice_(std::move(o.splice_)),
      bytes_(o.bytes_),
      size_(o.size_),
      may_push_(o.may_push_),
      pushes_(o.pushes_) {
  o.shared_ = nullptr;
}

ReadReply::~ReadReply() {
  if (shared_) shared_->reads.remove(ino_, off_, end_);
}

void ReadReply::push(const std::function<bool(uint64_t, const char*, size_t)>& store) {
  if (!may_push_ || !shared_) return;
  std::vector<char> buf = shared_->buffers.take();
  for (const OpenFile::Range& r : pushes_.ranges) {
    if (r.len == 0) continue;
    // Done while the request is in flight: the open file may be released once it is answered.
    const uint64_t to = shared_->reads.clip(ino_, r.off, r.end());
    if (to <= r.off) continue;
    try {
      buf.resize(to - r.off);
      buf.resize(file_->read_for_push(r.off, to - r.off, buf.data()));
    } catch (const std::exception& e) {
      log::debug(std::string("push skipped: ") + e.what());  // the reader's own read reports errors
      continue;
    }
    if (!buf.empty() && store(r.off, buf.data(), buf.size()) && shared_->bytes_pushed) {
      shared_->bytes_pushed->fetch_add(buf.size(), std::memory_order_relaxed);
    }
  }
  shared_->buffers.give(std::move(buf));
}

ReadReply Vfs::answer_read(OpenFile& file, uint64_t ino, uint64_t off, size_t size, const ReplyMeans& means,
                           size_t splice_buffers, std::vector<char>& buf) {
  ReadReply r(*reply_shared_, file, ino, off, off + size);
  if (may_splice(means, size) && file.read_spliced(off, size, splice_buffers, r.splice_)) {
    r.spliced_ = true;
    return r;
  }
  if (buf.size() < size) buf.resize(size);
  r.bytes_ = buf.data();
  r.size_ = file.read_pushing(off, size, buf.data(), r.pushes_);
  // Pushes (vfs/read_policy.h), all before the reply: the rest of the units this read decoded
  // (the woken reader must find them there) and, in a stream, the decoded units ahead (pushed
  // after the reply, they landed after the reader had asked for them: a request per unit
  // instead of one per push, docs/benchmarks.md, "What each mechanism buys").
  r.may_push_ = may_push(means, size, r.size_);
  return r;
}

}  // namespace h5d::vfs
