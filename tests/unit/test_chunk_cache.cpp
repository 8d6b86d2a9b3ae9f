// The decoded-chunk cache: one budget, decode once under concurrency, and the consumed list that
// lets a sequential stream recycle memory without pushing out chunks still wanted.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/engine/chunk_cache.h"

using h5d::ChunkBytes;
using h5d::ChunkCache;
using h5d::ChunkKey;

namespace {

ChunkBytes bytes(size_t n, uint8_t v) { return std::make_shared<const std::vector<uint8_t>>(n, v); }

// Loads key k as a 1000-byte chunk filled with k % 251, counting loads.
ChunkBytes load(ChunkCache& c, uint64_t k, std::atomic<int>& loads) {
  return c.get_or_load(ChunkKey{1, k}, [&] {
    ++loads;
    return bytes(1000, static_cast<uint8_t>(k % 251));
  });
}

}  // namespace

TEST_CASE("chunk cache: hits, budget and decode-once", "[core][cache]") {
  ChunkCache c(10000, 1, 2000);
  std::atomic<int> loads{0};
  for (uint64_t k = 0; k < 5; ++k) CHECK((*load(c, k, loads))[0] == k);
  CHECK(loads == 5);
  for (uint64_t k = 0; k < 5; ++k) load(c, k, loads);
  CHECK(loads == 5);  // all hits
  for (uint64_t k = 5; k < 30; ++k) load(c, k, loads);
  CHECK(c.used() <= c.budget());
  CHECK(c.used() == 10000);

  // Failures are not cached; the next caller loads again.
  CHECK_THROWS(c.get_or_load(ChunkKey{2, 0}, []() -> ChunkBytes { throw std::runtime_error("bad"); }));
  CHECK(c.get_or_load(ChunkKey{2, 0}, [] { return bytes(10, 7); })->size() == 10);

  // ready(): cached, not merely being loaded.
  CHECK(c.ready(ChunkKey{2, 0}));
  CHECK_FALSE(c.ready(ChunkKey{4, 0}));
  c.get_or_load(ChunkKey{4, 0}, [&] {
    CHECK(c.contains(ChunkKey{4, 0}));
    CHECK_FALSE(c.ready(ChunkKey{4, 0}));
    return bytes(10, 4);
  });
  CHECK(c.ready(ChunkKey{4, 0}));

  // Concurrent callers of one key: one load.
  std::atomic<int> slow{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      c.get_or_load(ChunkKey{3, 0}, [&] {
        ++slow;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return bytes(100, 1);
      });
    });
  }
  for (auto& t : ts) t.join();
  CHECK(slow == 1);
}

TEST_CASE("chunk cache: consumed chunks are recycled first, within their own budget", "[core][cache]") {
  ChunkCache c(10000, 1, 2000);  // room for 10 chunks, 2 of them consumed
  std::atomic<int> loads{0};
  // Four chunks a random reader still wants (read but not to their end).
  for (uint64_t k = 100; k < 104; ++k) load(c, k, loads);
  // A stream of 50 chunks, each read to its end.
  for (uint64_t k = 0; k < 50; ++k) {
    load(c, k, loads);
    c.consumed(ChunkKey{1, k});
    CHECK(c.used_consumed() <= 2000);
  }
  CHECK(loads == 54);
  // The random reader's chunks survived the stream ...
  for (uint64_t k = 100; k < 104; ++k) CHECK(c.peek(ChunkKey{1, k}) != nullptr);
  // ... and so did the newest consumed chunks (for the kernel's re-requests), not the older ones.
  CHECK(c.peek(ChunkKey{1, 49}) != nullptr);
  CHECK(c.peek(ChunkKey{1, 10}) == nullptr);
  CHECK(c.used() <= 4000 + 2000 + 2000);  // 4 hot + 2 consumed, 49 back in the hot list by peek

  // A hit moves a consumed chunk back to the hot list: it is not evicted by the next stream.
  c.consumed(ChunkKey{1, 48});
  load(c, 48, loads);  // hit
  for (uint64_t k = 200; k < 210; ++k) {
    load(c, k, loads);
    c.consumed(ChunkKey{1, k});
  }
  CHECK(c.peek(ChunkKey{1, 48}) != nullptr);
  CHECK(c.used() <= c.budget());

  // consumed() of an unknown key is a no-op; a chunk bigger than the consumed budget still stays
  // as the newest consumed entry.
  c.consumed(ChunkKey{9, 9});
  c.get_or_load(ChunkKey{5, 0}, [] { return bytes(3000, 5); });
  c.consumed(ChunkKey{5, 0});
  CHECK(c.peek(ChunkKey{5, 0}) != nullptr);
  CHECK(c.used() <= c.budget());
}

TEST_CASE("chunk cache: default consumed budget", "[core][cache]") {
  CHECK(ChunkCache(1ull << 30).consumed_budget() == 32ull << 20);
  CHECK(ChunkCache(64ull << 20).consumed_budget() == 16ull << 20);
  CHECK(ChunkCache(0).consumed_budget() == 0);
}
