// Buffers for decoded chunks: recycled when the cache lets go of them, and a few of each size in
// use touched ahead of need by a background thread of the lowest priority.
//
// Why: the first write to fresh memory costs a page fault and the zeroing of each page. On the
// VMs measured (docs/benchmarks.md, "What each mechanism buys") that is ~100 us per 128 KiB, a
// third of decoding a chunk into it, and a reader that keeps asking for chunks not yet cached
// (random frames while the cache grows) paid it on every request. Buffers that come back from the
// cache are reused as they are (already mapped); the background thread keeps `reserve` bytes of
// each recently used size ready so that the decode on the request path rarely touches fresh memory.
#pragma once
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace h5d {

class BufferPool {
 public:
  using Buffer = std::vector<uint8_t>;

  struct Counters {
    uint64_t reused = 0;         // handed out from the idle buffers (recycled or touched ahead)
    uint64_t touched_ahead = 0;  // made by the background thread
    uint64_t fresh = 0;          // made on the caller's thread (nothing idle of that size)
    uint64_t idle_bytes = 0;     // idle now
  };

  // max_idle: bytes of idle buffers kept, all sizes together. reserve: bytes of each recently
  // used size kept ready (at least two buffers; sizes above max_idle / 2 are not pooled).
  // background = false: no thread (buffers are still recycled).
  BufferPool(uint64_t max_idle, uint64_t reserve, bool background = true);
  ~BufferPool();  // stops the thread; buffers still in use are freed when released
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of exactly n bytes whose contents are unspecified (zeros or earlier data): the
  // caller overwrites all of it. It returns to the pool when its last reference goes.
  std::shared_ptr<Buffer> get(size_t n);

  Counters counters() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with every buffer handed out (they may outlive us)
  std::thread thread_;
};

}  // namespace h5d
