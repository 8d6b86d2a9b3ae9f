// One read's answer, decided in vfs and carried out by the FUSE adapter (Vfs::answer_read): the
// bytes (in the caller's buffer) or a spliced reply (a header, then runs of source files that the
// adapter splices from their page cache), plus the pages to push into the page cache before the
// reply. The adapter makes no decision of its own: it pushes what push() hands it and replies
// with what the rest describes.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "vfs/tree.h"

namespace h5d::vfs {

// Byte ranges of the reads being served: a push into the page cache must not touch pages an
// in-flight read holds locked (it would wait for that read's reply).
class ReadsInFlight {
 public:
  void add(uint64_t ino, uint64_t off, uint64_t end);
  void remove(uint64_t ino, uint64_t off, uint64_t end);
  // The end of the push [from, to) cut before the first in-flight read of `ino` it overlaps
  // (from when one overlaps its start).
  uint64_t clip(uint64_t ino, uint64_t from, uint64_t to);

 private:
  struct R {
    uint64_t ino, off, end;
  };
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards reads_
  std::vector<R> reads_;
};

// Buffers that pushes copy bytes into before they are stored. A few are kept for reuse (fresh
// memory costs page faults and zeroing at every push); the rest are freed, so that every request
// thread does not keep its own copy of the largest push it ever made (the daemon's memory bound).
class PushBuffers {
 public:
  static constexpr size_t kKeep = 4;                     // buffers kept: the streams served at once
  static constexpr size_t kKeepBytes = size_t(2) << 20;  // larger ones are never kept
  std::vector<char> take();
  void give(std::vector<char>&& b);

 private:
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards free_
  std::vector<std::vector<char>> free_;
};

// The answer to one read. The read counts as in flight (ReadsInFlight) until the answer is
// destroyed, i.e. until the adapter has replied.
class ReadReply {
 public:
  ReadReply(ReadReply&& o) noexcept;
  ReadReply& operator=(ReadReply&&) = delete;
  ReadReply(const ReadReply&) = delete;
  ~ReadReply();

  // Spliced: reply with splice().head then splice().runs; else with bytes()[0, size()).
  bool spliced() const { return spliced_; }
  const OpenFile::Spliced& splice() const { return splice_; }
  const char* bytes() const { return bytes_; }
  size_t size() const { return spliced_ ? splice_.size() : size_; }

  // The pushes, in order, before the reply: for each range worth pushing, its bytes (read now,
  // cut before pages of reads in flight) are handed to `store`, which returns whether the kernel
  // took them (a failure only means the kernel asks for those pages itself).
  void push(const std::function<bool(uint64_t off, const char* data, size_t n)>& store);

 private:
  friend class Vfs;
  struct Shared {  // what the Vfs keeps for every answer
    ReadsInFlight reads;
    PushBuffers buffers;
    std::atomic<uint64_t>* bytes_pushed = nullptr;  // stats.json bytes_pushed
  };
  ReadReply(Shared& shared, OpenFile& file, uint64_t ino, uint64_t off, uint64_t end);

  Shared* shared_;
  OpenFile* file_;
  uint64_t ino_, off_, end_;
  bool spliced_ = false;
  OpenFile::Spliced splice_;
  const char* bytes_ = nullptr;
  size_t size_ = 0;
  bool may_push_ = false;
  OpenFile::Pushes pushes_{};
};

}  // namespace h5d::vfs
