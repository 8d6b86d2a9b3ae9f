// Array::file_runs, the contract spliced replies build on: where it answers, the bytes its runs
// name in their files are exactly the array's bytes (oracle: libhdf5's H5Dread of each module's
// file, laid out as the stack's layout says), and where any byte is fill or not stored verbatim
// it declines. Stacked detector modules of both layouts, over contiguous and chunked files.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>

#include "core/array/array.h"
#include "core/array/stack_array.h"
#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

constexpr uint64_t kRows = 10, kEntry = 16 * 8 * 2;  // (10, 16, 8) uint16 per module

std::string module_file(const std::string& name, const std::string& layout, bool deflate, uint32_t seed) {
  FileSpec f;
  f.path = scratch_path("runs_" + name + ".h5");
  DsetSpec d;
  d.dims = {kRows, 16, 8};
  d.layout = layout;
  if (layout == "chunked") d.chunks = {2, 16, 8};
  d.shuffle = d.deflate = deflate;
  write_dataset(f, d, seed);
  return f.path;
}

std::vector<uint8_t> pread_runs(const std::vector<FileRun>& runs) {
  std::vector<uint8_t> out;
  for (const FileRun& r : runs) {
    const size_t at = out.size();
    out.resize(at + r.n);
    REQUIRE(::pread(r.fd->fd(), out.data() + at, r.n, static_cast<off_t>(r.file_off)) == static_cast<ssize_t>(r.n));
  }
  return out;
}

}  // namespace

TEST_CASE("a stack's file runs hold its bytes, and it declines fill and compressed modules", "[core][splice]") {
  const std::string contiguous = module_file("contiguous", "contiguous", false, 11);
  const std::string chunked = module_file("chunked", "chunked", false, 12);
  const std::vector<uint8_t> data[2] = {h5_read_all(contiguous, "/d"), h5_read_all(chunked, "/d")};
  REQUIRE(data[0].size() == kRows * kEntry);
  // Module 0: source rows 0-5 at entries 0-5 and rows 6-9 at entries 8-11 (entries 6, 7: fill);
  // module 1: rows 2-9 at entries 1-8 (entry 0 and 9-11: fill). 12 entries.
  const std::vector<StackArray::Piece> pieces[2] = {{{0, 0, 6}, {6, 8, 4}}, {{2, 1, 8}}};
  const uint64_t N = 12, M = 2;
  auto src_row = [&](uint64_t m, uint64_t e) -> int64_t {  // -1: fill
    for (const StackArray::Piece& p : pieces[m])
      if (e >= p.out_row && e < p.out_row + p.rows) return static_cast<int64_t>(p.src_row + (e - p.out_row));
    return -1;
  };
  DType t;
  t.typestr = "<u2";
  t.itemsize = 2;
  for (bool frames_first : {false, true}) {
    INFO("frames_first " << frames_first);
    CoreOptions o;
    o.threads = 2;
    TestCore e(o);
    std::vector<StackArray::Module> mods{{e.open_file(contiguous)->dataset_array("/d"), pieces[0]},
                                         {e.open_file(chunked)->dataset_array("/d"), pieces[1]}};
    StackArray::Layout L;
    L.entries = N;
    L.frames_first = frames_first;
    StackArray a(std::move(mods), Shape{16, 8}, t, std::vector<uint8_t>{0, 0}, L, "stack");
    REQUIRE(a.nbytes() == N * M * kEntry);
    // The expected bytes, and which (module, entry) cells are fill.
    std::vector<uint8_t> expect(a.nbytes(), 0);
    std::vector<bool> fill(a.nbytes(), false);
    for (uint64_t m = 0; m < M; ++m) {
      for (uint64_t en = 0; en < N; ++en) {
        const uint64_t at = (frames_first ? en * M + m : m * N + en) * kEntry;
        const int64_t r = src_row(m, en);
        if (r < 0) std::fill_n(fill.begin() + static_cast<std::ptrdiff_t>(at), kEntry, true);
        else std::memcpy(expect.data() + at, data[m].data() + static_cast<uint64_t>(r) * kEntry, kEntry);
      }
    }
    int answered = 0, declined = 0;
    for (uint64_t off = 0; off < a.nbytes(); off += 97) {
      for (uint64_t len : {1ull, 255ull, 256ull, 700ull, 2000ull, 6000ull}) {
        if (off + len > a.nbytes()) continue;
        bool has_fill = false;
        for (uint64_t i = off; i < off + len; ++i) has_fill = has_fill || fill[i];
        std::vector<FileRun> runs{FileRun{}};  // runs are appended: what was there stays
        INFO("bytes [" << off << ", " << off + len << ")");
        const bool ok = a.file_runs(off, len, runs);
        REQUIRE(runs.size() >= 1);
        CHECK(runs[0].fd == nullptr);
        if (!ok) {
          CHECK(runs.size() == 1);  // declined: nothing added
          CHECK(has_fill);
          ++declined;
          continue;
        }
        CHECK_FALSE(has_fill);
        runs.erase(runs.begin());
        const std::vector<uint8_t> got = pread_runs(runs);
        REQUIRE(got.size() == len);
        CHECK(std::memcmp(got.data(), expect.data() + off, len) == 0);
        ++answered;
      }
    }
    CHECK(answered > 50);
    CHECK(declined > 50);
    // One module's rows of a piece, modules first, are one run of its contiguous file (the
    // module's cells, one after another, are merged).
    if (!frames_first) {
      std::vector<FileRun> runs;
      REQUIRE(a.file_runs(0, 6 * kEntry, runs));
      CHECK(runs.size() == 1);
    }
  }
}

TEST_CASE("a stack of compressed modules has no file runs", "[core][splice]") {
  const std::string deflated = module_file("deflated", "chunked", true, 13);
  DType t;
  t.typestr = "<u2";
  t.itemsize = 2;
  {
    CoreOptions o;
    TestCore e(o);
    std::vector<StackArray::Module> mods{{e.open_file(deflated)->dataset_array("/d"), {{0, 0, kRows}}}};
    StackArray::Layout L;
    L.entries = kRows;
    L.frames_first = true;
    StackArray a(std::move(mods), Shape{16, 8}, t, std::vector<uint8_t>{0, 0}, L, "stack");
    std::vector<FileRun> runs;
    CHECK_FALSE(a.file_runs(0, kEntry, runs));
    CHECK(runs.empty());
  }
}
