#include "core/engine/chunk_cache.h"

#include <algorithm>
#include <atomic>

namespace h5d {

ChunkCache::ChunkCache(uint64_t budget_bytes, unsigned shards, uint64_t consumed_bytes) : budget_(budget_bytes) {
  if (shards == 0) shards = 1;
  shard_budget_ = budget_bytes / shards;
  consumed_budget_ = consumed_bytes == ~0ull ? std::min<uint64_t>(budget_bytes / 4, uint64_t(32) << 20)
                                             : std::min(consumed_bytes, budget_bytes);
  shard_consumed_budget_ = consumed_budget_ / shards;
  for (unsigned i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>());
}

uint64_t ChunkCache::new_array_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void ChunkCache::add_used(Shard& s, int64_t d) {
  s.used += static_cast<uint64_t>(d);
  used_.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
}

void ChunkCache::add_done(Shard& s, int64_t d) {
  s.used_done += static_cast<uint64_t>(d);
  used_done_.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
}

void ChunkCache::evict_back(Shard& s, List& from, bool consumed) {
  auto& back = from.back();
  const int64_t sz = static_cast<int64_t>(back.second->size());
  add_used(s, -sz);
  if (consumed) add_done(s, -sz);
  s.map.erase(back.first);
  from.pop_back();
}

void ChunkCache::trim(Shard& s) {
  // The consumed list keeps its newest entry even when that alone exceeds its budget: the
  // kernel's re-requests for a just-read chunk come right after the read.
  while (s.done.size() > 1 && s.used_done > shard_consumed_budget_) evict_back(s, s.done, true);
  while (s.used > shard_budget_ && !s.done.empty()) evict_back(s, s.done, true);
  while (s.used > shard_budget_ && !s.hot.empty()) evict_back(s, s.hot, false);
}

void ChunkCache::insert(Shard& s, const ChunkKey& key, const ChunkBytes& value) {
  const uint64_t sz = value->size();
  // A chunk larger than a shard's budget is not kept (the caller still gets it).
  if (sz > shard_budget_) return;
  if (s.map.count(key)) return;
  s.hot.emplace_front(key, value);
  s.map[key] = Entry{s.hot.begin(), false};
  add_used(s, static_cast<int64_t>(sz));
  trim(s);
}

void ChunkCache::touch(Shard& s, Entry& e) {
  if (e.consumed) {
    add_done(s, -static_cast<int64_t>(e.it->second->size()));
    e.consumed = false;
    s.hot.splice(s.hot.begin(), s.done, e.it);
  } else {
    s.hot.splice(s.hot.begin(), s.hot, e.it);
  }
}

void ChunkCache::consumed(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return;
  Entry& e = it->second;
  if (e.consumed) {
    s.done.splice(s.done.begin(), s.done, e.it);
    return;
  }
  e.consumed = true;
  add_done(s, static_cast<int64_t>(e.it->second->size()));
  s.done.splice(s.done.begin(), s.hot, e.it);
  trim(s);
}

ChunkCache::Claim ChunkCache::claim(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.map.count(key) || s.loading.count(key)) return nullptr;
  auto c = std::make_shared<std::promise<ChunkBytes>>();
  s.loading.emplace(key, c->get_future().share());
  return c;
}

void ChunkCache::fulfill(const ChunkKey& key, const Claim& c, const ChunkBytes& value) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  c->set_value(value);
  s.loading.erase(key);
  if (budget_ > 0) insert(s, key, value);
}

void ChunkCache::fail(const ChunkKey& key, const Claim& c, std::exception_ptr error) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  c->set_exception(error);
  s.loading.erase(key);
}

ChunkBytes ChunkCache::peek(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return nullptr;
  touch(s, it->second);
  return it->second.it->second;
}

bool ChunkCache::contains(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  return s.map.count(key) || s.loading.count(key);
}

bool ChunkCache::ready(const ChunkKey& key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lk(s.mu);
  return s.map.count(key) != 0;
}

ChunkBytes ChunkCache::get_or_load(const ChunkKey& key, const std::function<ChunkBytes()>& load, bool* hit) {
  Shard& s = shard_of(key);
  const Claim mine = std::make_shared<std::promise<ChunkBytes>>();
  {
    std::unique_lock<std::mutex> lk(s.mu);
    auto it = s.map.find(key);
    if (it != s.map.end()) {
      touch(s, it->second);
      if (hit) *hit = true;
      return it->second.it->second;
    }
    auto ld = s.loading.find(key);
    if (ld != s.loading.end()) {
      auto fut = ld->second;
      lk.unlock();
      if (hit) *hit = true;
      return fut.get();  // rethrows the loader's error
    }
    s.loading.emplace(key, mine->get_future().share());
  }
  if (hit) *hit = false;
  ChunkBytes value;
  try {
    value = load();
  } catch (...) {
    fail(key, mine, std::current_exception());
    throw;
  }
  fulfill(key, mine, value);
  return value;
}

}  // namespace h5d
