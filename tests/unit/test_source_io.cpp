// The I/O path's decisions without a mount (docs/architecture.md, "The I/O path"): how large a
// source request is, which chunks share one, how long runs are split, and how many workers one
// file's tasks may hold (a file whose reads hang leaves the others their depth).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/engine/source_io.h"
#include "core/engine/threadpool.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"
#include "tests/support/h5format_fixtures.h"

using namespace h5d;
using namespace h5d::test;

TEST_CASE("a source request is the read spread over the I/O depth, within its bounds", "[core][io]") {
  CoreOptions o;
  o.threads = 2;
  o.io_depth = 32;
  TestCore e(o);
  CHECK(e.io().request_size(0) == SourceIo::kMinRequest);                       // never below a read-ahead window
  CHECK(e.io().request_size(64ull << 20) == (2ull << 20));                     // 64 MiB over 32: one wave of 2 MiB
  CHECK(e.io().request_size(uint64_t(32) << 40) == SourceIo::kMaxRequest);       // never above what GPFS overlaps
  CoreOptions one = o;
  one.io_depth = 1;
  TestCore e1(one);
  CHECK(e1.io().request_size(8ull << 20) == (8ull << 20));                     // depth 1: the read in one request
  CHECK(e1.io().request_size(1ull << 30) == SourceIo::kMaxRequest);
}

TEST_CASE("a file's tasks hold at most their share of the pool; another file's run meanwhile", "[core][io]") {
  // Declared before the pool: its workers run tasks that use them until the pool is destroyed.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> blocked{0}, most{0}, finished{0};
  ThreadPool pool(4, 2);
  std::vector<std::function<void()>> hang;
  for (int i = 0; i < 8; ++i)
    hang.push_back([&] {
      const int now = ++blocked;
      for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
      }
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return release; });
      --blocked;
      ++finished;
    });
  REQUIRE(pool.try_run_detached(std::move(hang), 64, /*key=*/1));
  for (int i = 0; i < 200 && blocked.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(blocked.load() == 2);  // the hanging file holds its two workers, no more

  // Another file's batch gets the other workers besides its caller.
  std::set<std::thread::id> ran_on;
  std::vector<std::function<void()>> other;
  for (int i = 0; i < 16; ++i)
    other.push_back([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::lock_guard<std::mutex> lk(mu);
      ran_on.insert(std::this_thread::get_id());
    });
  pool.run_all(other, /*key=*/2);
  CHECK(ran_on.size() >= 2);
  CHECK(ran_on.count(std::this_thread::get_id()) == 1);
  CHECK(most.load() == 2);
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  for (int i = 0; i < 2000 && finished.load() < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(finished.load() == 8);  // the rest of the file's tasks ran once its workers were free
}

namespace {
// The engine of these tests: two decode threads (this machine's cores), I/O depth `depth`.
CoreOptions two_threads(unsigned depth) {
  CoreOptions o;
  o.threads = 2;
  o.io_depth = depth;
  return o;
}

// Drops the file's pages from the page cache (its bytes were written back): its next reads are
// requests to the storage, as on a cold parallel filesystem.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::fsync(fd) == 0);
  REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  ::close(fd);
}

// The source requests of a full read of /d; `cold`: its file's pages dropped first.
uint64_t requests_for_full_read(const std::string& path, unsigned depth, std::vector<uint8_t>& got, Stats** st,
                                std::unique_ptr<TestCore>& e, bool cold = true) {
  e = std::make_unique<TestCore>(two_threads(depth));
  auto a = e->open_file(path)->dataset_array("/d");
  if (cold) evict(path);
  got.assign(a->nbytes(), 0);
  const uint64_t before = e->stats().source_requests.load();
  e->read_bytes(*a, 0, got.size(), got.data());
  *st = &e->stats();
  return e->stats().source_requests.load() - before;
}
// A shuffle+deflate dataset /d of one chunk per row of `dims` (uint16), written chunk after chunk.
std::string deflated_rows(const std::string& name, std::vector<hsize_t> dims, uint32_t seed) {
  FileSpec f;
  f.path = scratch_path(name);
  DsetSpec d;
  d.dims = dims;
  d.chunks = dims;
  d.chunks[0] = 1;
  d.shuffle = d.deflate = true;
  write_dataset(f, d, seed);
  return f.path;
}

// A contiguous dataset /d of `dims` (uint16).
std::string contiguous_u16(const std::string& name, std::vector<hsize_t> dims, uint32_t seed) {
  FileSpec f;
  f.path = scratch_path(name);
  DsetSpec d;
  d.layout = "contiguous";
  d.dims = dims;
  write_dataset(f, d, seed);
  return f.path;
}

// /d of 150 frames of 64x64 uint16 in chunks of 75 x 16 x 16 (h5py's own chunk shape is of
// this kind: a chunk holds a part of many frames), shuffle+deflate or stored as it is.
std::string block_chunked(const std::string& name, bool deflate, uint32_t seed) {
  FileSpec f;
  f.path = scratch_path(name);
  DsetSpec d;
  d.dims = {150, 64, 64};
  d.chunks = {75, 16, 16};
  d.shuffle = d.deflate = deflate;
  write_dataset(f, d, seed);
  return f.path;
}

// Full reads of /d of one file, compared with libhdf5's (the oracle, read first).
struct FullReads {
  explicit FullReads(std::string p) : path(std::move(p)), oracle(h5_read_all(path, "/d")) {}
  // The source requests of a full read at I/O depth `depth`; `cold`: the file evicted first.
  uint64_t requests(unsigned depth, bool cold = true) { return requests_for_full_read(path, depth, got, &st, e, cold); }
  bool same() const { return got == oracle; }
  std::string path;
  std::vector<uint8_t> oracle, got;
  Stats* st = nullptr;
  std::unique_ptr<TestCore> e;
};
}  // namespace

TEST_CASE("a source request ends on a multiple of the smallest request, or where its range ends", "[core][io]") {
  constexpr uint64_t a = SourceIo::kMinRequest;
  CHECK(SourceIo::request_end(0, a, 1ull << 20) == a);
  CHECK(SourceIo::request_end(4536, 153000, 10ull << 20) == a);           // 153 KB: one block, to its end
  CHECK(SourceIo::request_end(a, 300000, 10ull << 20) == 3 * a);          // 300 KB: two blocks
  CHECK(SourceIo::request_end(a + 7, 1ull << 20, 10ull << 20) == 9 * a);  // 1 MiB: 8 blocks, ending on one
  CHECK(SourceIo::request_end(0, a, a + 1000) == a + 1000);               // less than a block left: taken along
  CHECK(SourceIo::request_end(100, 1ull << 20, 5000) == 5000);            // the range ends first
  CHECK(SourceIo::request_end(5000, a, 5000) == 5000);                    // nothing left
  // Cutting any range into pieces: contiguous, every cut but the last on a multiple, at most
  // one piece more than whole blocks of the piece size would take.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t off = rng() % (64ull << 20), len = 1 + rng() % (16ull << 20), piece = 1 + rng() % (4ull << 20);
    const uint64_t end = off + len;
    const uint64_t blocks = std::max<uint64_t>(1, (piece + a / 2) / a);
    uint64_t at = off, n = 0;
    while (at < end) {
      const uint64_t cut = SourceIo::request_end(at, piece, end);
      REQUIRE(cut > at);
      REQUIRE(cut <= end);
      if (cut != end) {
        REQUIRE(cut % a == 0);
        REQUIRE(end - cut >= a);
      }
      REQUIRE(cut - at < (blocks + 1) * a + a);
      at = cut;
      ++n;
    }
    REQUIRE(n <= len / (blocks * a) + 2);
  }
}

TEST_CASE("read-ahead of data stored as it is read asks for whole blocks of the file", "[core][io]") {
  // A contiguous dataset, whose data lie at an offset of the file that is no multiple of 128 KiB
  // (after its metadata), read ahead in two windows that end at no such multiple either: each
  // window's requests reach the blocks it touches in whole, so the stream's next window starts
  // with a block already read and its own requests start on a multiple (SourceIo::request_end).
  const std::string path = contiguous_u16("io_readahead_blocks.h5", {1024, 2048}, 4);  // 4 MiB
  uint64_t data_at = 0;
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(file >= 0);
    const hid_t ds = H5Dopen2(file, "/d", H5P_DEFAULT);
    REQUIRE(ds >= 0);
    data_at = H5Dget_offset(ds);  // the oracle: libhdf5's own answer
    H5Dclose(ds);
    H5Fclose(file);
  }
  constexpr uint64_t a = SourceIo::kMinRequest;
  REQUIRE(data_at % a != 0);
  const uint64_t w1 = 1234567, w2 = 2345678;  // data bytes [0, w1), then [w1, w2)
  const auto down = [&](uint64_t x) { return x / a * a; };
  const auto up = [&](uint64_t x) { return (x + a - 1) / a * a; };
  CoreOptions o = two_threads(32);
  TestCore e(o);
  auto arr = e.open_file(path)->dataset_array("/d");
  REQUIRE_FALSE(arr->decodes());
  evict(path);
  Stats& st = e.stats();
  const auto wait_for = [&](uint64_t bytes) {
    for (int i = 0; i < 3000 && st.readahead_bytes.load() + st.readahead_resident_bytes.load() < bytes; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  e.prefetch_bytes(*arr, 0, w1);
  const uint64_t first = up(data_at + w1) - down(data_at);
  wait_for(first);
  CHECK(st.readahead_bytes.load() + st.readahead_resident_bytes.load() == first);
  e.prefetch_bytes(*arr, w1, w2 - w1);
  const uint64_t second = up(data_at + w2) - down(data_at + w1);
  wait_for(first + second);
  CHECK(st.readahead_bytes.load() + st.readahead_resident_bytes.load() == first + second);
  // The data are unchanged by it.
  std::vector<uint8_t> got(arr->nbytes());
  e.read_bytes(*arr, 0, got.size(), got.data());
  CHECK(got == h5_read_all(path, "/d"));
}

TEST_CASE("adjacent compressed chunks share a request as the depth allows, bytes unchanged", "[core][io]") {
  FullReads r(deflated_rows("io_merge.h5", {256, 16384}, 9));  // 256 chunks of 32 KiB
  // Depth 1: the whole read is one request's worth, capped by the scratch request size.
  const uint64_t deep1 = r.requests(1);
  CHECK(r.same());
  CHECK(r.st->merged_requests.load() > 0);
  CHECK(deep1 < 256 / 4);
  // Depth 1024: every chunk is its own request, all in flight at once.
  const uint64_t deep = r.requests(1024);
  CHECK(r.same());
  CHECK(deep > deep1);
  // Cached: a request costs no round trip, so no chunks are merged (each chunk its own task).
  h5_read_all(r.path, "/d");  // the oracle's read brings the whole file into the page cache
  r.requests(1, /*cold=*/false);
  CHECK(r.same());
  CHECK(r.st->merged_requests.load() == 0);
}

TEST_CASE("a long contiguous run is split into requests spread over the depth", "[core][io]") {
  FullReads r(contiguous_u16("io_split.h5", {1024, 4096}, 3));  // 8 MiB
  CHECK(r.requests(1) == 1);    // 8 MiB <= the largest request
  CHECK(r.same());
  CHECK(r.requests(16) == 16);  // 512 KiB each
  CHECK(r.same());
  CHECK(r.requests(1024) == 64);  // never below 128 KiB
  CHECK(r.same());
}

TEST_CASE("bytes read into the page cache count as read-ahead or data, once, and only when not cached", "[core][io]") {
  const std::string path = scratch_path("io_counted.bin");
  h5d::testing::write_file_bytes(path, std::vector<uint8_t>(1 << 20, 'x'));
  evict(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) == 0);  // the kernel reads no more than asked
  const OpenFd file(fd, path, current_identity(path));  // closes fd
  CoreOptions o;
  o.threads = 2;
  TestCore e(o);
  Stats& st = e.stats();
  const uint64_t piece = 256 << 10;
  REQUIRE_FALSE(source_resident(fd, 0, piece));  // the oracle: the kernel's own residency answer
  CHECK(e.io().read_into_page_cache(file, 0, piece, SourceIo::Kind::ReadAhead));
  CHECK(source_resident(fd, 0, piece));
  CHECK(st.readahead_bytes.load() == piece);
  CHECK(st.bytes_pread.load() == 0);
  CHECK(st.source_requests.load() == 1);
  // Cached now: no request, nothing counted.
  CHECK_FALSE(e.io().read_into_page_cache(file, 0, piece, SourceIo::Kind::ReadAhead));
  CHECK(st.source_requests.load() == 1);
  // A hint of the data path (the chunk index) counts as data.
  REQUIRE_FALSE(source_resident(fd, 3 * piece, piece));
  CHECK(e.io().read_into_page_cache(file, 3 * piece, piece, SourceIo::Kind::Data));
  CHECK(st.bytes_pread.load() == piece);
  CHECK(st.readahead_bytes.load() == piece);
  CHECK(st.source_requests.load() == 2);
}

TEST_CASE("the pool grows beyond its CPU places only for workers waiting on the storage", "[core][io]") {
  // Warm: tasks that never wait, from two readers, nested batches (a decode-ahead's plan) and
  // detached ones. The workers are busy nearly all the time; none waits on the storage. A worker
  // between two tasks takes queued work without a new one starting, so the pool stays within its
  // `cpu` places plus one worker for each place whose worker waits for its nested batch (the
  // place is free meanwhile): 2 x cpu at most (it grew to 15 of 64 when every moment without
  // an idle worker started one).
  ThreadPool warm(64, 0, /*cpu=*/2);
  std::atomic<uint64_t> sum{0};
  auto spin = [&sum] {
    uint64_t x = 0;
    for (uint64_t k = 0; k < 20000; ++k) x += k * k;
    sum += x;
  };
  auto reader = [&] {
    for (int r = 0; r < 150; ++r) {
      std::vector<std::function<void()>> tasks;
      for (int i = 0; i < 6; ++i)
        tasks.push_back([&] {
          std::vector<std::function<void()>> nested(3, spin);
          warm.run_all(nested);
        });
      warm.try_run_detached(std::vector<std::function<void()>>(4, spin));
      warm.run_all(tasks);
    }
  };
  std::thread a(reader), b(reader);
  a.join();
  b.join();
  CHECK(sum.load() > 0);
  CHECK(warm.started() <= 4);

  // Cold: every task waits on the storage until all 16 wait at once (or 10 s pass): workers
  // start until the batch's tasks are all in flight, whatever the CPU places.
  ThreadPool cold(64, 0, /*cpu=*/2);
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0, most = 0;
  std::vector<std::function<void()>> reads(16, [&] {
    ThreadPool::Waiting w;  // as SourceIo::read marks a read the page cache cannot answer
    std::unique_lock<std::mutex> lk(mu);
    most = std::max(most, ++waiting);
    cv.notify_all();
    cv.wait_for(lk, std::chrono::seconds(10), [&] { return most == 16; });
    --waiting;
  });
  cold.run_all(reads);
  CHECK(most == 16);
  CHECK(cold.started() >= 15);  // the caller runs one
}

TEST_CASE("a large compressed chunk read cold is split into requests over the depth, bytes unchanged", "[core][io]") {
  FullReads r(deflated_rows("io_bigchunk.h5", {4, 512, 1024}, 5));  // 4 chunks of 1 MiB, some 100 KiB stored
  // Depth 1: the read is one request's worth: each chunk one request (too large to share one).
  const uint64_t whole = r.requests(1);
  CHECK(r.same());
  CHECK(whole == 4);
  const uint64_t stored = r.st->bytes_pread.load();
  REQUIRE(stored > 4 * SourceIo::kMinRequest);  // each chunk larger than the smallest request
  // Depth 32: 4 MiB over 32 is below 128 KiB, so each chunk is read in pieces of about that.
  const uint64_t split = r.requests(32);
  CHECK(r.same());
  CHECK(r.st->bytes_pread.load() == stored);  // the same bytes, no page read twice
  // At most one piece per 128 KiB and chunk, more than one request for a chunk read cold (the
  // kernel's own read-ahead of one piece may bring a neighbouring chunk in whole first: that
  // one is then read as one request, cached).
  CHECK(split > whole);
  CHECK(split <= stored / SourceIo::kMinRequest + 4);
  // Cached: no round trip to save, one request a chunk. (Tried again when memory pressure from
  // tests running beside it evicted some of the file meanwhile.)
  bool one_each = false;
  for (int i = 0; i < 3 && !one_each; ++i) {
    h5_read_all(r.path, "/d");
    one_each = r.requests(32, /*cold=*/false) == 4;
    CHECK(r.same());
  }
  CHECK(one_each);
}

TEST_CASE("concurrent reads of one block of chunks read each chunk from the source once", "[core][io]") {
  // Chunks of 75 frames x 16 x 16 (h5py's own chunk shape is of this kind): a read of a few
  // frames needs every chunk of their block, and so do the reads of the neighbouring frames
  // the kernel asks for at the same time. Each chunk must be read and decoded once.
  const std::string path = block_chunked("io_claims.h5", true, 13);
  const std::vector<uint8_t> oracle = h5_read_all(path, "/d");
  const uint64_t frame = 64 * 64 * 2, frames = 10, readers = 6;  // 60 frames, all in the first block
  auto read_block = [&](bool together, uint64_t* pread, uint64_t* decoded) {
    TestCore e(two_threads(8));
    auto a = e.open_file(path)->dataset_array("/d");
    evict(path);
    std::vector<std::vector<uint8_t>> got(readers, std::vector<uint8_t>(frames * frame));
    std::atomic<unsigned> ready{0};
    auto one = [&](uint64_t k) {
      ++ready;
      while (together && ready.load() < readers) std::this_thread::yield();
      e.read_bytes(*a, k * frames * frame, frames * frame, got[k].data());
    };
    if (together) {
      std::vector<std::thread> ts;
      for (uint64_t k = 0; k < readers; ++k) ts.emplace_back(one, k);
      for (auto& t : ts) t.join();
    } else {
      for (uint64_t k = 0; k < readers; ++k) one(k);
    }
    for (uint64_t k = 0; k < readers; ++k)
      CHECK(std::equal(got[k].begin(), got[k].end(), oracle.begin() + static_cast<std::ptrdiff_t>(k * frames * frame)));
    *pread = e.stats().bytes_pread.load();
    *decoded = e.stats().chunks_decoded.load();
  };
  uint64_t alone_bytes = 0, alone_chunks = 0;
  read_block(false, &alone_bytes, &alone_chunks);
  CHECK(alone_chunks == 16);  // one after another: the first read decodes the block's chunks
  for (int round = 0; round < 3; ++round) {
    uint64_t bytes = 0, chunks = 0;
    read_block(true, &bytes, &chunks);
    CHECK(chunks == 16);
    CHECK(bytes <= alone_bytes);
  }
}

TEST_CASE("uncompressed chunks narrower than a request are read whole, once, not run by run", "[core][io]") {
  // Chunks of 75 frames x 16 x 16, uncompressed: a chunk's runs are 32 bytes, and a read of 10
  // frames needs 160 of them from each of the 16 chunks of a block. Read run by run (the next
  // read the next runs of each chunk), 32 chunks cost 38,399 requests. Read whole into the
  // chunk cache, a chunk costs one request at most (adjacent chunks share one), whatever the
  // reads' sizes.
  const std::string path = block_chunked("io_narrow.h5", false, 17);
  const std::vector<uint8_t> oracle = h5_read_all(path, "/d");
  TestCore e(two_threads(8));
  auto a = e.open_file(path)->dataset_array("/d");
  evict(path);
  const uint64_t frame = 64 * 64 * 2;
  std::vector<uint8_t> got(oracle.size());
  for (uint64_t k = 0; k < 15; ++k) e.read_bytes(*a, k * 10 * frame, 10 * frame, got.data() + k * 10 * frame);
  CHECK(got == oracle);
  CHECK(e.stats().source_requests.load() <= 32);
  CHECK(e.stats().bytes_pread.load() <= oracle.size() + 2 * 4096);  // each byte once
  // Chunks as wide as the rows stay byte runs of the file (read straight into the reader's
  // buffer, and spliced by the mount): nothing goes through the cache.
  FileSpec g;
  g.path = scratch_path("io_wide.h5");
  DsetSpec w;
  w.dims = {150, 64, 64};
  w.chunks = {5, 64, 64};
  write_dataset(g, w, 19);
  const std::vector<uint8_t> oracle2 = h5_read_all(g.path, "/d");
  auto b = e.open_file(g.path)->dataset_array("/d");
  const uint64_t decoded = e.stats().chunks_decoded.load();
  std::vector<uint8_t> got2(oracle2.size());
  e.read_bytes(*b, 0, got2.size(), got2.data());
  CHECK(got2 == oracle2);
  CHECK(e.stats().chunks_decoded.load() == decoded);
}
