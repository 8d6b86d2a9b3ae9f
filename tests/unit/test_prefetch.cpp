// Engine::prefetch_bytes with a stream's cover (core/engine.h, ReadCover): decode-ahead whose
// bytes the reader has read meanwhile is dropped, the rest decodes; bytes stay H5Dread's.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

// Waits until `n` chunks have been decoded ahead and, with `dropped`, some task was dropped
// (bounded: a hung pool fails). A task is one chunk, or several read with one request.
void wait_for_tasks(TestCore& e, uint64_t n, bool dropped) {
  for (int i = 0; i < 3000; ++i) {
    if (e.stats().chunks_prefetched.load() >= n && (!dropped || e.stats().prefetch_dropped.load() > 0)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("decode-ahead did not finish");
}

}  // namespace

TEST_CASE("decode-ahead drops the pieces its stream has covered and decodes the rest", "[core][prefetch]") {
  FileSpec f;
  f.path = scratch_path("prefetch_cover.h5");
  DsetSpec d;
  d.dims = {64, 32768};  // 64 frames of 64 KiB, one per chunk: 16 chunks per 1 MiB piece
  d.chunks = {1, 32768};
  d.shuffle = d.deflate = true;
  write_dataset(f, d, 5);
  const auto oracle = h5_read_all(f.path, "/d");
  const uint64_t frame = 32768 * 2;
  static_assert(h5d::kPrefetchPiece == 16 * 65536, "the test's pieces are 16 chunks");

  CoreOptions o;
  o.threads = 2;
  TestCore e(o);
  auto a = e.open_file(f.path)->dataset_array("/d");
  REQUIRE(a->decodes());

  // The stream has read the first 32 frames (two pieces) by the time the decode-ahead runs.
  auto cover = std::make_shared<ReadCover>();
  cover->set(0, 32 * frame);
  e.prefetch_bytes(*a, 0, a->nbytes(), cover);
  wait_for_tasks(e, 32, true);
  CHECK(e.stats().prefetch_dropped.load() >= 2);  // two pieces, in one task or more each
  CHECK(e.stats().chunks_prefetched.load() == 32);
  CHECK(e.stats().chunks_decoded.load() == 32);

  // A reader of the covered half decodes its frames itself; everything is H5Dread's bytes.
  std::vector<uint8_t> got(oracle.size());
  e.read_bytes(*a, 0, got.size(), got.data());
  CHECK(got == oracle);
  CHECK(e.stats().chunks_decoded.load() == 64);

  // Without a cover nothing is dropped.
  TestCore e2(o);
  auto a2 = e2.open_file(f.path)->dataset_array("/d");
  e2.prefetch_bytes(*a2, 0, a2->nbytes());
  wait_for_tasks(e2, 64, false);
  CHECK(e2.stats().prefetch_dropped.load() == 0);
  CHECK(e2.stats().chunks_decoded.load() == 64);
}

TEST_CASE("the decode-ahead's room is half the chunk cache's free and read-through bytes", "[core][prefetch]") {
  FileSpec f;
  f.path = scratch_path("prefetch_room.h5");
  DsetSpec d;
  d.dims = {256, 32768};  // 256 frames of 64 KiB, one per chunk (16 MiB decoded)
  d.chunks = {1, 32768};
  d.shuffle = d.deflate = true;
  write_dataset(f, d, 6);
  const auto oracle = h5_read_all(f.path, "/d");
  const uint64_t frame = 32768 * 2;

  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 4ull << 20;
  TestCore e(o);
  auto a = e.open_file(f.path)->dataset_array("/d");
  REQUIRE(a->decodes());
  CHECK(e.decode_ahead_room() == (2ull << 20));  // empty: half the budget

  // 16 frames decoded ahead and not read: the room shrinks by what they hold.
  e.prefetch_bytes(*a, 0, 16 * frame);
  wait_for_tasks(e, 16, false);
  // (The last task's share of the planned bytes is let go just after its chunk is counted.)
  for (int i = 0; i < 500 && e.decode_ahead_room() != ((4ull << 20) - e.cache().used()) / 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const uint64_t held = e.cache().used();
  CHECK(held > 0);
  CHECK(held <= 16 * frame);
  CHECK(e.decode_ahead_room() == ((4ull << 20) - held) / 2);

  // Read to their ends, chunks are the cache's to evict first: the room is whole again.
  std::vector<uint8_t> got(64 * frame);
  e.read_bytes(*a, 0, got.size(), got.data());
  CHECK(std::equal(got.begin(), got.end(), oracle.begin()));
  CHECK(e.cache().used_consumed() > 0);
  CHECK(e.decode_ahead_room() == ((4ull << 20) - e.cache().used() + e.cache().used_consumed()) / 2);
  CHECK(e.decode_ahead_room() >= (3ull << 19));
}
