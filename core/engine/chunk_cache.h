// Decoded chunks, shared by every file and reader under one byte budget. Sharded by key for
// concurrency. A chunk wanted by several readers at once is decoded once: later callers wait for
// the first one's result. Failures are not cached.
//
// Two lists per shard, both LRU:
//   hot       chunks decoded (or prefetched) and not yet read to their end;
//   consumed  chunks a reader has read to their last element (`consumed()`), the common case of
//             a sequential stream. They stay for the kernel's re-requests (misaligned and mmap
//             read-around requests touch a chunk two or three times in quick succession) but
//             only up to a small byte budget, so a stream recycles a few MiB of memory instead
//             of filling the whole budget with chunks the kernel's page cache already holds.
//             Fresh pages cost the daemon a page fault and a zeroed page each: recycling them
//             made a first sequential read about 18% faster (docs/benchmarks.md, "What each
//             mechanism buys").
// Eviction takes consumed chunks first, then the coldest hot ones. A hit moves a chunk back to
// the front of the hot list.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace h5d {

using ChunkBytes = std::shared_ptr<const std::vector<uint8_t>>;

struct ChunkKey {
  uint64_t array_id = 0;  // unique per dataset (Engine-assigned)
  uint64_t chunk = 0;     // linear chunk index
  bool operator==(const ChunkKey& o) const { return array_id == o.array_id && chunk == o.chunk; }
};

class ChunkCache {
 public:
  // consumed_bytes: the budget of the consumed list (part of budget_bytes); by default
  // min(budget / 4, 32 MiB).
  explicit ChunkCache(uint64_t budget_bytes, unsigned shards = 16, uint64_t consumed_bytes = ~0ull);
  // Returns the cached chunk or runs `load` (once across concurrent callers) and caches it.
  // `hit` (optional) tells whether it came from the cache.
  ChunkBytes get_or_load(const ChunkKey& key, const std::function<ChunkBytes()>& load, bool* hit = nullptr);
  // Claims `key` for the caller to load by other means than get_or_load (a merged request
  // reads several chunks before it decodes any): non-null when the chunk was neither cached nor
  // being loaded; get_or_load callers then wait for the claim as for a load. The caller ends
  // every claim it got with fulfill (the chunk is cached) or fail (waiters get the error).
  using Claim = std::shared_ptr<std::promise<ChunkBytes>>;
  Claim claim(const ChunkKey& key);
  void fulfill(const ChunkKey& key, const Claim& c, const ChunkBytes& value);
  void fail(const ChunkKey& key, const Claim& c, std::exception_ptr error);
  // Cached chunk or nullptr; never loads.
  ChunkBytes peek(const ChunkKey& key);
  bool contains(const ChunkKey& key);
  // Decoded and cached (not merely being decoded); does not count as a use.
  bool ready(const ChunkKey& key);
  // A reader has read this chunk to its end: move it to the consumed list (no-op if not cached).
  void consumed(const ChunkKey& key);
  uint64_t budget() const { return budget_; }
  uint64_t consumed_budget() const { return consumed_budget_; }
  // Both lists, and the consumed list, over all shards: read without a shard's lock (the decode-ahead
  // asks for its room at every read, under a leaf lock of its own).
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t used_consumed() const { return used_done_.load(std::memory_order_relaxed); }
  static uint64_t new_array_id();

 private:
  struct KeyHash {
    size_t operator()(const ChunkKey& k) const { return std::hash<uint64_t>()(k.array_id * 0x9E3779B97F4A7C15ull ^ k.chunk); }
  };
  using List = std::list<std::pair<ChunkKey, ChunkBytes>>;
  struct Entry {
    List::iterator it;
    bool consumed = false;
  };
  struct Shard {
    std::mutex mu;   // lock level 5 (docs/architecture.md), a leaf (before BufferPool's); guards all below
    List hot;        // front = most recent
    List done;       // consumed chunks, front = most recent
    std::unordered_map<ChunkKey, Entry, KeyHash> map;
    std::unordered_map<ChunkKey, std::shared_future<ChunkBytes>, KeyHash> loading;
    uint64_t used = 0;       // both lists
    uint64_t used_done = 0;  // the consumed list
  };
  Shard& shard_of(const ChunkKey& k) { return *shards_[KeyHash()(k) % shards_.size()]; }
  void insert(Shard& s, const ChunkKey& key, const ChunkBytes& value);
  // Moves a cached entry to the front of the hot list.
  void touch(Shard& s, Entry& e);
  void evict_back(Shard& s, List& from, bool consumed);
  void trim(Shard& s);
  // Every change of a shard's `used` / `used_done` goes through these (under the shard's lock),
  // so that the totals above stay their sums.
  void add_used(Shard& s, int64_t d);
  void add_done(Shard& s, int64_t d);

  uint64_t budget_;
  uint64_t shard_budget_;
  uint64_t consumed_budget_;
  uint64_t shard_consumed_budget_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> used_{0}, used_done_{0};
};

}  // namespace h5d
