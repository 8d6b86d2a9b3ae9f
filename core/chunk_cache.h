// Decoded chunks, shared by every file and reader under one byte budget. Sharded by key for
// concurrency; each shard is an LRU. A chunk wanted by several readers at once is decoded once:
// later callers wait for the first one's result. Failures are not cached.
#pragma once
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
  explicit ChunkCache(uint64_t budget_bytes, unsigned shards = 16);
  // Returns the cached chunk or runs `load` (once across concurrent callers) and caches it.
  // `hit` (optional) tells whether it came from the cache.
  ChunkBytes get_or_load(const ChunkKey& key, const std::function<ChunkBytes()>& load, bool* hit = nullptr);
  // Cached chunk or nullptr; never loads.
  ChunkBytes peek(const ChunkKey& key);
  bool contains(const ChunkKey& key);
  uint64_t budget() const { return budget_; }
  uint64_t used() const;
  static uint64_t new_array_id();

 private:
  struct KeyHash {
    size_t operator()(const ChunkKey& k) const { return std::hash<uint64_t>()(k.array_id * 0x9E3779B97F4A7C15ull ^ k.chunk); }
  };
  struct Shard {
    std::mutex mu;  // guards everything below
    std::list<std::pair<ChunkKey, ChunkBytes>> lru;  // front = most recent
    std::unordered_map<ChunkKey, decltype(lru)::iterator, KeyHash> map;
    std::unordered_map<ChunkKey, std::shared_future<ChunkBytes>, KeyHash> loading;
    uint64_t used = 0;
  };
  Shard& shard_of(const ChunkKey& k) { return *shards_[KeyHash()(k) % shards_.size()]; }
  void insert(Shard& s, const ChunkKey& key, const ChunkBytes& value);

  uint64_t budget_;
  uint64_t shard_budget_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace h5d
