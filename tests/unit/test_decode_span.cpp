// Array::decode_span, the contract the read policy builds on: after a read of one byte at `off`,
// every byte of decode_span(off) is decoded (the decoded-chunk cache says so: it is filled by
// the real decodes, not by decode_span), for plain chunked datasets of several chunkings, a
// concatenation, a VDS over files and stacked detector modules (both layouts).
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/array/array.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "core/array/stack_array.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

CoreOptions opts() {
  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 64 << 20;
  return o;
}

// For offsets spread over the array: fresh engine, read one byte, the span is decoded.
void check_spans(const std::function<ArrayPtr(TestCore&)>& make, bool expect_units) {
  for (uint64_t step : {1ull, 7ull, 13ull}) {
    TestCore e(opts());
    ArrayPtr a = make(e);
    REQUIRE(a->decodes() == expect_units);
    const uint64_t n = a->nbytes();
    for (uint64_t off = (step * 977) % n; off < n; off += n / 9 + step) {
      const ByteSpan s = a->decode_span(off);
      if (!expect_units) {
        CHECK(s.empty());
        continue;
      }
      INFO(a->describe() << " off " << off << " span [" << s.lo << ", " << s.hi << ")");
      REQUIRE(!s.empty());
      CHECK(s.lo <= off);
      CHECK(s.hi > off);
      CHECK(s.hi <= n);
      uint8_t b;
      e.read_bytes(*a, off, 1, &b);
      CHECK(e.bytes_decoded(*a, s.lo, s.hi - s.lo));
    }
  }
}

std::string chunked(const std::string& name, std::vector<hsize_t> dims, std::vector<hsize_t> chunks, bool deflate = true) {
  FileSpec f;
  f.path = scratch_path("span_" + name + ".h5");
  DsetSpec d;
  d.dims = dims;
  d.chunks = chunks;
  d.shuffle = d.deflate = deflate;
  write_dataset(f, d, 3);
  return f.path;
}

}  // namespace

TEST_CASE("decode spans of chunked datasets cover what one read decodes", "[core][span]") {
  struct C {
    const char* name;
    std::vector<hsize_t> dims, chunks;
  } cases[] = {{"frame", {40, 16, 8}, {1, 16, 8}},     {"frames3", {40, 16, 8}, {3, 16, 8}},
               {"half", {40, 16, 8}, {1, 8, 8}},       {"cols", {40, 16, 8}, {2, 16, 4}},
               {"one", {5, 16, 8}, {5, 16, 8}},        {"edge", {41, 15, 8}, {4, 4, 8}},
               {"rank1", {1000}, {64}}};
  for (const C& c : cases) {
    const std::string path = chunked(c.name, c.dims, c.chunks);
    check_spans([&](TestCore& e) { return e.open_file(path)->dataset_array("/d"); }, true);
  }
  // One frame per chunk: the span is the frame.
  const std::string path = scratch_path("span_frame.h5");  // written above
  TestCore e(opts());
  ArrayPtr a = e.open_file(path)->dataset_array("/d");
  const ByteSpan s = a->decode_span(5 * 256 + 17);
  CHECK(s.lo == 5 * 256);
  CHECK(s.hi == 6 * 256);
  // Uncompressed data has no units.
  const std::string plain = chunked("plain", {40, 16, 8}, {1, 16, 8}, false);
  check_spans([&](TestCore& e2) { return e2.open_file(plain)->dataset_array("/d"); }, false);
}

TEST_CASE("decode spans through a concatenation stay inside each part", "[core][span]") {
  const std::string p1 = chunked("cat1", {10, 16, 8}, {3, 16, 8}), p2 = chunked("cat2", {12, 16, 8}, {2, 16, 8});
  auto make = [&](TestCore& e) -> ArrayPtr {
    std::vector<ConcatArray::Part> parts{
        {[&e, p1] { return e.open_file(p1)->dataset_array("/d"); }, 1, 8, p1, p1, "/d"},
        {[&e, p2] { return e.open_file(p2)->dataset_array("/d"); }, 3, 9, p2, p2, "/d"}};
    DType t;
    t.typestr = "<u2";
    t.itemsize = 2;
    return std::make_shared<ConcatArray>(std::move(parts), Shape{16, 8}, t, "concat");
  };
  check_spans(make, true);
  TestCore e(opts());
  ArrayPtr a = make(e);
  // Output row 7 is part 1's row 8, in its chunk [6, 9): clipped to the part's last row (8).
  const ByteSpan s = a->decode_span(7 * 256);
  CHECK(s.lo == 5 * 256);
  CHECK(s.hi == 8 * 256);
  // Output row 8 is part 2's row 3, in its chunk [2, 4): row 3 only (row 2 is not in the part).
  const ByteSpan t = a->decode_span(8 * 256 + 3);
  CHECK(t.lo == 8 * 256);
  CHECK(t.hi == 9 * 256);
}

TEST_CASE("decode spans through a VDS of whole rows follow its sources", "[core][span]") {
  const std::string s1 = chunked("vsrc1", {10, 16, 8}, {1, 16, 8}), s2 = chunked("vsrc2", {10, 16, 8}, {4, 16, 8});
  const std::string path = scratch_path("span_vds.h5");
  {
    hid_t fid = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t vd[3] = {20, 16, 8}, sd[3] = {10, 16, 8};
    hid_t vspace = H5Screate_simple(3, vd, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const std::string srcs[2] = {s1, s2};
    for (int i = 0; i < 2; ++i) {
      hid_t src = H5Screate_simple(3, sd, nullptr);
      hid_t vs = H5Scopy(vspace);
      hsize_t start[3] = {hsize_t(10 * i), 0, 0}, count[3] = {1, 1, 1}, block[3] = {10, 16, 8};
      H5Sselect_hyperslab(vs, H5S_SELECT_SET, start, nullptr, count, block);
      H5Pset_virtual(dcpl, vs, srcs[i].c_str(), "/d", src);
      H5Sclose(vs);
      H5Sclose(src);
    }
    hid_t d = H5Dcreate2(fid, "v", H5T_STD_U16LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(vspace);
    H5Fclose(fid);
  }
  check_spans([&](TestCore& e) { return e.open_file(path)->dataset_array("/v"); }, true);
  TestCore e(opts());
  ArrayPtr a = e.open_file(path)->dataset_array("/v");
  CHECK(a->decode_span(3 * 256 + 1).lo == 3 * 256);   // one frame per chunk in file 1
  CHECK(a->decode_span(3 * 256 + 1).hi == 4 * 256);
  CHECK(a->decode_span(19 * 256).lo == 18 * 256);      // file 2: chunk of rows [8, 12) -> [8, 10)
  CHECK(a->decode_span(19 * 256).hi == 20 * 256);
}

TEST_CASE("decode spans of stacked modules are one module's bytes", "[core][span]") {
  const std::string m0 = chunked("mod0", {10, 16, 8}, {1, 16, 8}), m1 = chunked("mod1", {10, 16, 8}, {2, 16, 8});
  for (bool frames_first : {false, true}) {
    auto make = [&](TestCore& e) -> ArrayPtr {
      std::vector<StackArray::Module> mods{
          {e.open_file(m0)->dataset_array("/d"), {{0, 0, 6}, {6, 8, 4}}},
          {e.open_file(m1)->dataset_array("/d"), {{2, 1, 8}}}};
      StackArray::Layout L;
      L.entries = 12;
      L.frames_first = frames_first;
      DType t;
      t.typestr = "<u2";
      t.itemsize = 2;
      return std::make_shared<StackArray>(std::move(mods), Shape{16, 8}, t, std::vector<uint8_t>{0, 0}, L, "stack");
    };
    // Fill (entries no module covers) is not a unit; check offsets inside covered entries.
    TestCore e(opts());
    ArrayPtr a = make(e);
    REQUIRE(a->decodes());
    const uint64_t frame = 256;
    for (uint64_t m = 0; m < 2; ++m) {
      for (uint64_t entry : {1ull, 3ull, 5ull, 8ull}) {
        const uint64_t off = frames_first ? (entry * 2 + m) * frame + 11 : (m * 12 + entry) * frame + 11;
        const ByteSpan s = a->decode_span(off);
        INFO("frames_first " << frames_first << " module " << m << " entry " << entry);
        REQUIRE(!s.empty());
        CHECK(s.lo <= off);
        CHECK(s.hi > off);
        uint8_t b;
        e.read_bytes(*a, off, 1, &b);
        CHECK(e.bytes_decoded(*a, s.lo, s.hi - s.lo));
        if (frames_first) CHECK(s.hi - s.lo == frame);  // one cell of one frame: the next is another module's
      }
    }
  }
}

TEST_CASE("a concatenation opens the parts a read touches at once, and only those", "[core][concat]") {
  // Six in-memory parts of 4 rows x 8 bytes, each row filled with its global row number; part 3
  // cannot be opened. On the engine's pool: a read of parts 0-2 opens those three concurrently
  // (each open waits until three are in flight, so a one-at-a-time open would time out).
  DType t;
  t.typestr = "|u1";
  t.itemsize = 1;
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, most = 0;
  std::vector<int> opened(6, 0);
  std::vector<ConcatArray::Part> parts;
  for (size_t p = 0; p < 6; ++p) {
    parts.push_back({[&, p]() -> ArrayPtr {
                       {
                         std::unique_lock<std::mutex> lk(mu);
                         ++opened[p];
                         most = std::max(most, ++in_flight);
                         cv.notify_all();
                         cv.wait_for(lk, std::chrono::seconds(2), [&] { return in_flight >= 3 || p >= 3; });
                         --in_flight;
                       }
                       if (p == 3) throw Error(EIO, "part 3 is damaged");
                       std::vector<uint8_t> bytes(4 * 8);
                       for (int r = 0; r < 4; ++r) std::fill(bytes.begin() + r * 8, bytes.begin() + r * 8 + 8, uint8_t(p * 4 + size_t(r)));
                       return std::make_shared<MemoryArray>(Shape{4, 8}, t, std::move(bytes), "part");
                     },
                     0, 4, "part" + std::to_string(p), "file" + std::to_string(p), "/d"});
  }
  // open_many is told which parts a read is about to open, before their opens; what it throws
  // does not stop them.
  std::vector<std::vector<std::string>> announced;
  auto open_many = [&](const std::vector<const ConcatArray::Part*>& many) {
    std::vector<std::string> files;
    for (const ConcatArray::Part* p : many) files.push_back(p->file + ":" + p->dataset);
    {
      std::lock_guard<std::mutex> lk(mu);
      files.push_back("in flight: " + std::to_string(in_flight));  // 0: before the opens
      announced.push_back(files);
    }
    throw Error(EIO, "a hint that failed");
  };
  TestCore e(opts());
  auto a = std::make_shared<ConcatArray>(std::move(parts), Shape{8}, t, "concat", open_many, &e.pool());
  std::vector<uint8_t> out(12 * 8);
  e.read_bytes(*a, 0, out.size(), out.data());
  for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == i / 8);
  CHECK(most == 3);
  CHECK(opened == std::vector<int>{1, 1, 1, 0, 0, 0});  // parts 3-5 untouched
  REQUIRE(announced.size() == 1);
  CHECK(announced[0] == std::vector<std::string>{"file0:/d", "file1:/d", "file2:/d", "in flight: 0"});
  // A read over parts 3-5: part 3's own error, naming it; parts 4 and 5 still read.
  try {
    e.read_bytes(*a, 12 * 8, 12 * 8, out.data());
    FAIL("no error for the damaged part");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find("part3") != std::string::npos);
    CHECK(std::string(err.what()).find("part 3 is damaged") != std::string::npos);
  }
  e.read_bytes(*a, 16 * 8, 8 * 8, out.data());
  for (size_t i = 0; i < 8 * 8; ++i) REQUIRE(out[i] == 16 + i / 8);
  CHECK(opened[4] == 1);
  CHECK(opened[5] == 1);
  // Only unopened parts are announced, and only two or more: 3-5 (3 failed, so it is unopened),
  // then nothing for the read of 4-5 (open by then).
  REQUIRE(announced.size() == 2);
  CHECK(announced[1] == std::vector<std::string>{"file3:/d", "file4:/d", "file5:/d", "in flight: 0"});
}
