// Source I/O's decisions, request by request: SourceIo over a fake Storage that records every
// request it gets and answers from memory, with a page cache the test controls. Each test
// plans what an array would (byte runs, stored chunks, read-ahead), runs the plan on the
// engine's pool, and checks the requests against the rules in source_io.h and the bytes
// against the file's own.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/array/reader.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/engine/source_io.h"
#include "core/error.h"

using namespace h5d;

namespace {

constexpr uint64_t kPage = 4096;

// One file in memory. Its page cache is a set of pages: a request marks the pages it read as
// cached (as the kernel does), `cache` and `drop` set them. Requests longer than `fail_above`
// fail with EIO; with `gate` set, the first request waits until `open_gate`.
class FakeStorage final : public Storage {
 public:
  explicit FakeStorage(uint64_t size) : bytes(size) {
    for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  }
  std::shared_ptr<const OpenFd> open(const Source& s) override {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // unused: pread is ours
    if (fd < 0) throw Error(errno, "/dev/null");
    return std::make_shared<OpenFd>(fd, s.path, s.id);
  }
  void recheck(const Source&) override {}
  bool resident(const OpenFd&, uint64_t off, uint64_t n) override {
    std::lock_guard<std::mutex> lk(mu);
    for (uint64_t p = off / kPage; p * kPage < off + n; ++p)
      if (!cached.count(p)) return false;
    return true;
  }
  void pread(const OpenFd&, void* buf, uint64_t n, uint64_t off) override {
    {
      std::unique_lock<std::mutex> lk(mu);
      requests.emplace_back(off, n);
      if (gate && requests.size() == 1) {
        gated = true;
        cv.notify_all();
        cv.wait(lk, [&] { return !gate; });
      }
      if (n > fail_above) throw Error(EIO, "fake storage: request too large");
      if (off + n > bytes.size()) throw Error(EIO, "fake storage: short read");
      for (uint64_t p = off / kPage; p * kPage < off + n; ++p) cached.insert(p);
    }
    std::copy_n(bytes.data() + off, n, static_cast<uint8_t*>(buf));
  }

  void cache(uint64_t off, uint64_t n) {
    std::lock_guard<std::mutex> lk(mu);
    for (uint64_t p = off / kPage; p * kPage < off + n; ++p) cached.insert(p);
  }
  void drop() {
    std::lock_guard<std::mutex> lk(mu);
    cached.clear();
    requests.clear();
  }
  std::vector<std::pair<uint64_t, uint64_t>> taken() {
    std::lock_guard<std::mutex> lk(mu);
    auto r = requests;
    std::sort(r.begin(), r.end());
    return r;
  }
  void wait_gated() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return gated; });
  }
  void open_gate() {
    std::lock_guard<std::mutex> lk(mu);
    gate = false;
    cv.notify_all();
  }

  std::vector<uint8_t> bytes;
  uint64_t fail_above = ~0ull;
  bool gate = false;

 private:
  std::mutex mu;
  std::condition_variable cv;
  bool gated = false;
  std::set<uint64_t> cached;
  std::vector<std::pair<uint64_t, uint64_t>> requests;
};

// An engine of two decode threads and depth `depth`, and source I/O over a fake file.
struct Rig {
  explicit Rig(uint64_t size, unsigned depth = 8) : engine(options(depth)), storage(size), io(engine, storage) {
    source = make_source("/fake/file.h5", FileIdentity{}, "file.h5:/d");
  }
  ~Rig() { engine.pool().shutdown(); }
  static EngineOptions options(unsigned depth) {
    EngineOptions o;
    o.threads = 2;
    o.io_depth = depth;
    o.cache_bytes = 64ull << 20;
    return o;
  }

  // Stored chunks of `size` bytes each at `addrs`; a chunk decodes to its stored bytes, each
  // XOR 0x5A, delivered into `out` (the chunks' decoded bytes one after another).
  std::vector<ChunkJob> chunks(const std::vector<uint64_t>& addrs, uint64_t size, std::vector<uint8_t>& out,
                               uint64_t array_id) {
    out.assign(addrs.size() * size, 0);
    std::vector<ChunkJob> jobs;
    for (size_t i = 0; i < addrs.size(); ++i) {
      ChunkJob j;
      j.addr = addrs[i];
      j.size = size;
      j.key = ChunkKey{array_id, i};
      j.decode = [this, addr = addrs[i], size](const uint8_t* stored) {
        auto v = std::make_shared<std::vector<uint8_t>>(size);
        if (!stored) {
          io.read_stored(*source, v->data(), size, addr, 0);
          stored = v->data();
        }
        for (uint64_t k = 0; k < size; ++k) (*v)[k] = stored[k] ^ 0x5A;
        return ChunkBytes(std::move(v));
      };
      j.deliver = [dst = out.data() + i * size](const ChunkBytes& b) { std::copy(b->begin(), b->end(), dst); };
      jobs.push_back(std::move(j));
    }
    return jobs;
  }
  // What `chunks` must deliver.
  std::vector<uint8_t> expected(const std::vector<uint64_t>& addrs, uint64_t size) const {
    std::vector<uint8_t> e;
    for (uint64_t a : addrs)
      for (uint64_t k = 0; k < size; ++k) e.push_back(storage.bytes[a + k] ^ 0x5A);
    return e;
  }
  void run(ReadPlan& plan) { h5d::run(engine, plan); }

  Engine engine;
  FakeStorage storage;
  SourceIo io;
  SourcePtr source;
};

// `count` chunk addresses of `size` bytes from `start`, `gap` bytes apart.
std::vector<uint64_t> laid_out(uint64_t start, uint64_t count, uint64_t size, uint64_t gap) {
  std::vector<uint64_t> a;
  for (uint64_t i = 0; i < count; ++i) a.push_back(start + i * (size + gap));
  return a;
}

}  // namespace

TEST_CASE("source I/O: adjacent cold chunks share requests up to the plan's request size", "[core][io]") {
  Rig r(4 << 20);
  const auto addrs = laid_out(10000, 64, 8192, 0);  // 512 KiB of chunks, back to back
  std::vector<uint8_t> out;
  ReadPlan plan;
  plan.request = 128 << 10;
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, out, 1), plan, false);
  CHECK(plan.tasks.size() == 4);  // 512 KiB in groups of at most 128 KiB
  r.run(plan);
  CHECK(out == r.expected(addrs, 8192));
  const auto req = r.storage.taken();
  REQUIRE(req.size() == 4);
  uint64_t at = addrs.front();
  for (const auto& [off, n] : req) {
    CHECK(off == at);  // together they cover the chunks once, in order
    CHECK(n == 128 << 10);
    at += n;
  }
  CHECK(r.engine.stats().merged_requests.load() == 4);
  CHECK(r.engine.stats().cache_misses.load() == 64);
}

TEST_CASE("source I/O: chunks more than a page apart, or too large together, take requests of their own", "[core][io]") {
  Rig r(4 << 20);
  std::vector<uint64_t> addrs = laid_out(0, 4, 8192, SourceIo::kMergeGap);  // within the gap: one group
  const auto far = laid_out(1 << 20, 3, 8192, SourceIo::kMergeGap + 1);    // beyond it: alone
  addrs.insert(addrs.end(), far.begin(), far.end());
  std::vector<uint8_t> out;
  ReadPlan plan;
  plan.request = 1 << 20;
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, out, 2), plan, false);
  r.run(plan);
  CHECK(out == r.expected(addrs, 8192));
  const auto req = r.storage.taken();
  REQUIRE(req.size() == 4);
  CHECK(req[0] == std::pair<uint64_t, uint64_t>(0, 4 * 8192 + 3 * SourceIo::kMergeGap));
  for (size_t i = 0; i < 3; ++i) CHECK(req[1 + i] == std::make_pair(far[i], uint64_t(8192)));

  // No plan request size (each chunk alone), or a scratch buffer's worth at most.
  Rig r2(8 << 20);
  const auto many = laid_out(0, 48, 64 << 10, 0);  // 3 MiB back to back
  ReadPlan each, capped;
  capped.request = SourceIo::kMaxRequest;
  r2.io.plan_chunks(r2.source, r2.chunks(many, 64 << 10, out, 3), each, false);
  CHECK(each.tasks.size() == 48);
  r2.io.plan_chunks(r2.source, r2.chunks(many, 64 << 10, out, 4), capped, false);
  r2.run(capped);
  CHECK(out == r2.expected(many, 64 << 10));
  const auto big = r2.storage.taken();
  CHECK(big.size() == 3);
  for (const auto& [off, n] : big) CHECK(n <= SourceIo::kMaxScratchRequest);
}

TEST_CASE("source I/O: a group the page cache holds is read chunk by chunk; decoded chunks join none", "[core][io]") {
  Rig r(4 << 20);
  const auto addrs = laid_out(0, 16, 8192, 0);
  r.storage.cache(0, 16 * 8192);
  std::vector<uint8_t> out;
  ReadPlan plan;
  plan.request = 1 << 20;
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, out, 5), plan, false);
  CHECK(plan.tasks.size() == 16);  // no round trip to save: one task a chunk
  r.run(plan);
  CHECK(out == r.expected(addrs, 8192));
  CHECK(r.storage.taken().size() == 16);
  CHECK(r.engine.stats().merged_requests.load() == 0);

  // Cold again, chunks 4 and 5 decoded already: they split the run into two groups and are
  // not read again.
  r.storage.drop();
  Rig r2(4 << 20);
  std::vector<uint8_t> first, again;
  ReadPlan p1;
  r2.io.plan_chunks(r2.source, r2.chunks({addrs[4], addrs[5]}, 8192, first, 6), p1, false);
  r2.run(p1);
  r2.storage.drop();
  auto jobs = r2.chunks(addrs, 8192, again, 16);
  jobs[4].key = ChunkKey{6, 0};  // the keys the first read cached them under
  jobs[5].key = ChunkKey{6, 1};
  ReadPlan p2;
  p2.request = 1 << 20;
  r2.io.plan_chunks(r2.source, std::move(jobs), p2, false);
  r2.run(p2);
  CHECK(again == r2.expected(addrs, 8192));
  const auto req = r2.storage.taken();
  REQUIRE(req.size() == 2);
  CHECK(req[0] == std::pair<uint64_t, uint64_t>(0, 4 * 8192));
  CHECK(req[1] == std::pair<uint64_t, uint64_t>(6 * 8192, 10 * 8192));
  CHECK(r2.engine.stats().cache_hits.load() == 2);
}

TEST_CASE("source I/O: a merged request that fails is read again chunk by chunk", "[core][io]") {
  Rig r(1 << 20);
  const auto addrs = laid_out(0, 8, 8192, 0);
  r.storage.fail_above = 8192;  // only single chunks can be read
  std::vector<uint8_t> out;
  ReadPlan plan;
  plan.request = 1 << 20;
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, out, 7), plan, false);
  CHECK(plan.tasks.size() == 1);
  r.run(plan);
  CHECK(out == r.expected(addrs, 8192));
  const auto req = r.storage.taken();
  CHECK(req.size() == 9);  // the group's request, then each chunk's own
  CHECK(r.engine.stats().merged_requests.load() == 0);

  // A chunk that cannot be read at all fails the read with the storage's error.
  Rig bad(1 << 20);
  bad.storage.fail_above = 0;
  ReadPlan p;
  p.request = 1 << 20;
  bad.io.plan_chunks(bad.source, bad.chunks(addrs, 8192, out, 8), p, false);
  CHECK_THROWS_AS(bad.run(p), Error);
}

TEST_CASE("source I/O: concurrent plans of one block read each chunk once", "[core][io]") {
  Rig r(1 << 20);
  const auto addrs = laid_out(0, 8, 8192, 0);
  r.storage.gate = true;  // the first plan's merged request waits until the second plan runs
  std::vector<uint8_t> a, b;
  ReadPlan pa, pb;
  pa.request = pb.request = 1 << 20;
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, a, 9), pa, false);
  std::thread first([&] { r.run(pa); });
  r.storage.wait_gated();  // the first plan holds its claims and waits on the storage
  r.io.plan_chunks(r.source, r.chunks(addrs, 8192, b, 9), pb, false);
  std::thread second([&] { r.run(pb); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the second plan waits for the claims
  r.storage.open_gate();
  first.join();
  second.join();
  CHECK(a == r.expected(addrs, 8192));
  CHECK(b == a);
  CHECK(r.storage.taken().size() == 1);  // one request, for both
  CHECK(r.engine.stats().cache_misses.load() == 8);
}

TEST_CASE("source I/O: byte runs are split at block boundaries and small ones share a task", "[core][io]") {
  Rig r(16 << 20);
  std::vector<uint8_t> out(16 << 20);
  ReadPlan plan;
  plan.request = 1 << 20;
  // One run of 4 MiB + 1000 from an odd offset, then 40 runs of 8 KiB 64 KiB apart.
  const uint64_t start = 12345, len = (4 << 20) + 1000;
  std::vector<ByteRun> runs{{start, out.data(), len}};
  uint64_t dst = len;
  for (uint64_t i = 0; i < 40; ++i, dst += 8192) runs.push_back({(6 << 20) + i * (64 << 10), out.data() + dst, 8192});
  r.io.plan_runs(r.source, runs, plan);
  // The long run in pieces of about the request size (five or six: each cut on a block), the
  // 40 small runs in tasks of at most kMinRequest (three).
  const size_t pieces = plan.tasks.size() - 3;
  CHECK(pieces >= 5);
  CHECK(pieces <= 6);
  r.run(plan);
  for (const ByteRun& run : runs) CHECK(std::equal(run.dst, run.dst + run.n, r.storage.bytes.data() + run.src));
  const auto req = r.storage.taken();
  CHECK(req.size() == pieces + 40);
  uint64_t at = start;
  for (size_t i = 0; i < pieces; ++i) {
    CHECK(req[i].first == at);
    at += req[i].second;
    if (i + 1 < pieces) CHECK(at % SourceIo::kMinRequest == 0);  // every cut on a block boundary
    CHECK(req[i].second <= plan.request + SourceIo::kMinRequest);
  }
  CHECK(at == start + len);
}

TEST_CASE("source I/O: read-ahead asks for whole blocks once, nothing the page cache holds", "[core][io]") {
  Rig r(8 << 20);
  r.source = make_source("/fake/file.h5", FileIdentity{0, 0, 8 << 20, 0}, "file.h5:/d");
  constexpr uint64_t a = SourceIo::kMinRequest;
  ReadPlan plan;
  plan.request = 512 << 10;  // requests of up to four blocks
  // Two windows of a stream that meet inside a block, and a range in a block already cached.
  r.io.plan_readahead(r.source, {{1000, nullptr, 300000}}, plan);
  r.io.plan_readahead(r.source, {{301000, nullptr, 200000}}, plan);
  r.storage.cache(4 * a, a);
  r.io.plan_readahead(r.source, {{4 * a + 10, nullptr, 100}}, plan);
  r.run(plan);
  const auto req = r.storage.taken();
  // [0, 3a) for the first window, [3a, 4a) for the second: the block they share asked for once.
  REQUIRE(req.size() == 2);
  CHECK(req[0] == std::pair<uint64_t, uint64_t>(0, 3 * a));
  CHECK(req[1] == std::pair<uint64_t, uint64_t>(3 * a, a));
  CHECK(r.engine.stats().readahead_bytes.load() == 4 * a);
  CHECK(r.engine.stats().readahead_resident_bytes.load() == a);
  CHECK(r.engine.stats().bytes_pread.load() == 0);
  // Not past the file's end.
  ReadPlan tail;
  r.io.plan_readahead(r.source, {{(8 << 20) - 5000, nullptr, 100}}, tail);
  r.run(tail);
  const auto req2 = r.storage.taken();
  CHECK(req2.back().first + req2.back().second == (8ull << 20));
}

TEST_CASE("source I/O: a large stored chunk is read in pieces when cold, in one request when cached", "[core][io]") {
  Rig r(8 << 20);
  std::vector<uint8_t> buf(1 << 20);
  r.io.read_stored(*r.source, buf.data(), buf.size(), 5000, 256 << 10);
  CHECK(std::equal(buf.begin(), buf.end(), r.storage.bytes.begin() + 5000));
  const auto cold = r.storage.taken();
  CHECK(cold.size() >= 4);
  CHECK(cold.size() <= 5);
  uint64_t at = 5000;
  for (const auto& [off, n] : cold) {
    CHECK(off == at);
    at += n;
  }
  CHECK(at == 5000 + buf.size());
  // Now cached: one request.
  r.io.read_stored(*r.source, buf.data(), buf.size(), 5000, 256 << 10);
  CHECK(r.storage.taken().size() == cold.size() + 1);
  // No piece size: one request however cold.
  r.storage.drop();
  r.io.read_stored(*r.source, buf.data(), buf.size(), 5000, 0);
  CHECK(r.storage.taken().size() == 1);
}

TEST_CASE("source I/O: a reply splices only bytes the page cache holds whole", "[io]") {
  Rig r(1 << 20);
  auto fd = r.storage.open(*r.source);
  CHECK_FALSE(r.io.may_splice(*fd, 8192, 65536));  // cold: the ordinary read asks the storage
  r.storage.cache(8192, 32768);
  CHECK_FALSE(r.io.may_splice(*fd, 8192, 65536));  // half of it: still not
  CHECK(r.io.may_splice(*fd, 8192, 32768));
  r.storage.cache(40960, 32768);
  CHECK(r.io.may_splice(*fd, 8192, 65536));
  CHECK(r.storage.taken().empty());  // deciding asked the storage for nothing
}
