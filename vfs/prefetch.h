// Sequential read detection for one open file, driving Engine::prefetch_bytes.
//
// Design: one cursor per open file (where the next sequential read should start). A read that
// starts within `seek_tolerance` of the cursor (before or after: the kernel's read-ahead and the
// multi-threaded loop deliver requests slightly out of order) continues the stream; anything else
// is a seek and resets the stream. While a stream continues, the prefetcher keeps a window of
// `window` bytes decoded ahead of the reader: when the prefetched frontier is less than half a
// window ahead, it asks for [frontier, read_end + window) and doubles the window (up to `max`).
// Backpressure is the engine's: prefetch_bytes drops work when its pool is saturated, so the
// prefetcher never runs far ahead. Nothing is prefetched until the stream has gone `after`
// bytes: the kernel's mmap read-around turns one random page fault into two or three contiguous
// requests (a window centred on the fault, then an asynchronous read-ahead), which look
// sequential but are not a stream; prefetching behind them decoded about four chunks per
// randomly read frame.
#pragma once
#include <cstdint>
#include <mutex>

namespace h5d::vfs {

class SequentialPrefetcher {
 public:
  struct Config {
    uint64_t initial = (1ull << 20) + (128ull << 10);
    uint64_t max = 64ull << 20;
    uint64_t seek_tolerance = 1ull << 20;
    uint64_t after = 4ull << 20;
  };
  struct Range {
    uint64_t off = 0, len = 0;  // len 0: nothing to prefetch
  };

  explicit SequentialPrefetcher(Config cfg) : cfg_(cfg), window_(cfg.initial) {}

  // Reports a read of [off, off+len) in a file of `file_size` bytes; returns what to prefetch.
  Range on_read(uint64_t off, uint64_t len, uint64_t file_size);

  uint64_t window() const;
  // Whether the reads so far form a stream at least `after` bytes long.
  bool streaming() const;

 private:
  Config cfg_;
  mutable std::mutex mu_;  // guards everything below
  bool started_ = false;
  uint64_t start_ = 0;     // where the current stream began
  uint64_t cursor_ = 0;    // end of the furthest read of the current stream
  uint64_t frontier_ = 0;  // end of what has been asked for
  uint64_t window_;
  uint64_t streak_ = 0;
};

}  // namespace h5d::vfs
