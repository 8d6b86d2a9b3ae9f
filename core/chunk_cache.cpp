#include "core/chunk_cache.h"

#include <atomic>

namespace h5d {

ChunkCache::ChunkCache(uint64_t budget_bytes, unsigned shards) : budget_(budget_bytes) {
  if (shards == 0) shards = 1;
  shard_budget_ = budget_bytes / shards;
  for (unsigned i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>());
}

uint64_t ChunkCache::new_array_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

uint64_t ChunkCache::used() const {
  uint64_t u = 0;
  for (const auto& s : shards_) {
    std::lock_guard<std::mutex> lk(s->mu);
    u += s->used;
  }
  return u;
}

void ChunkCache::insert(Shard& s, const ChunkKey& key, const ChunkBytes& value) {
  const uint64_t sz = value->size();
  // A chunk larger than a shard's budget is not kept (the caller still gets it).
  if (sz > shard_budget_) return;
  if (s.map.count(key)) return;
  s.lru.emplace_front(key, value);
  s.map[key] = s.lru.begin();
  s.used += sz;
  while (s.used > shard_budget_ && !s.lru.empty()) {
    auto& back = s.lru.back();
    s.used -= back.second->size();
    s.map.erase(back.first);
    s.lru.pop_back();
  }
}

ChunkBytes ChunkCache::peek(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return nullptr;
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  return it->second->second;
}

bool ChunkCache::contains(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  return s.map.count(key) || s.loading.count(key);
}

ChunkBytes ChunkCache::get_or_load(const ChunkKey& key, const std::function<ChunkBytes()>& load, bool* hit) {
  Shard& s = shard_of(key);
  std::promise<ChunkBytes> promise;
  {
    std::unique_lock<std::mutex> lk(s.mu);
    auto it = s.map.find(key);
    if (it != s.map.end()) {
      s.lru.splice(s.lru.begin(), s.lru, it->second);
      if (hit) *hit = true;
      return it->second->second;
    }
    auto ld = s.loading.find(key);
    if (ld != s.loading.end()) {
      auto fut = ld->second;
      lk.unlock();
      if (hit) *hit = true;
      return fut.get();  // rethrows the loader's error
    }
    s.loading.emplace(key, promise.get_future().share());
  }
  if (hit) *hit = false;
  ChunkBytes value;
  try {
    value = load();
  } catch (...) {
    std::lock_guard<std::mutex> lk(s.mu);
    promise.set_exception(std::current_exception());
    s.loading.erase(key);
    throw;
  }
  std::lock_guard<std::mutex> lk(s.mu);
  promise.set_value(value);
  s.loading.erase(key);
  if (budget_ > 0) insert(s, key, value);
  return value;
}

}  // namespace h5d
