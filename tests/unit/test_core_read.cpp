// End-to-end reads through core (Engine::read_bytes) compared with H5Dread of the same dataset,
// over the matrix of layouts x chunk indexes x filters x element types the core issue names.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include <sys/stat.h>
#include <unistd.h>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

CoreOptions small_opts() {
  CoreOptions o;
  o.threads = 3;
  o.cache_bytes = 8 << 20;
  return o;
}

// Compares whole-array reads and many random byte ranges with the oracle.
void check_ranges(TestCore& e, const std::string& path, const std::string& dset, uint32_t seed = 7) {
  INFO(path << ":" << dset);
  auto oracle = h5_read_all(path, "/" + dset);
  auto a = e.open_file(path)->dataset_array("/" + dset);
  REQUIRE(a->nbytes() == oracle.size());
  std::vector<uint8_t> got(oracle.size());
  e.read_bytes(*a, 0, got.size(), got.data());
  REQUIRE(got == oracle);
  std::mt19937_64 rng(seed);
  const uint64_t n = oracle.size();
  if (n == 0) return;
  for (int i = 0; i < 60; ++i) {
    uint64_t off = rng() % n;
    uint64_t len = (i % 3 == 0) ? 1 : 1 + rng() % std::min<uint64_t>(n - off, (i % 2) ? 97 : 70000);
    len = std::min(len, n - off);
    std::vector<uint8_t> part(len, 0xEE);
    e.read_bytes(*a, off, len, part.data());
    INFO("offset " << off << " length " << len);
    REQUIRE(std::memcmp(part.data(), oracle.data() + off, len) == 0);
  }
  // Reads past the end are clipped.
  std::vector<uint8_t> tail(16, 0);
  e.read_bytes(*a, n - 1, 16, tail.data());
  REQUIRE(tail[0] == oracle[n - 1]);
}

}  // namespace

TEST_CASE("chunked datasets of every index type and filter read like H5Dread", "[core]") {
  TestCore e(small_opts());
  struct Index {
    const char* name;
    bool latest;
    int unlimited;  // number of unlimited dims
  };
  const Index indexes[] = {{"btree1", false, 0}, {"btree1u", false, 1}, {"farray", true, 0},
                           {"earray", true, 1}, {"btree2", true, 2}};
  struct Filt {
    const char* name;
    bool shuffle, deflate, fletcher;
  };
  const Filt filts[] = {{"none", false, false, false}, {"shuf_defl", true, true, false},
                        {"defl_fl32", false, true, true}, {"shuf_defl_fl32", true, true, true}};
  int n = 0;
  for (const auto& ix : indexes) {
    FileSpec f;
    f.path = scratch_path(std::string("chunked_") + ix.name + ".h5");
    f.latest = ix.latest;
    for (const auto& fl : filts) {
      for (int rank = 1; rank <= 3; ++rank) {
        DsetSpec d;
        d.name = std::string(fl.name) + "_r" + std::to_string(rank);
        d.type = rank == 2 ? H5T_STD_I32BE : H5T_STD_U16LE;
        if (rank == 1) { d.dims = {1000}; d.chunks = {64}; }
        if (rank == 2) { d.dims = {37, 29}; d.chunks = {8, 7}; }
        if (rank == 3) { d.dims = {6, 33, 17}; d.chunks = {1, 16, 17}; }
        d.maxdims = d.dims;
        for (int u = 0; u < ix.unlimited && u < rank; ++u) d.maxdims[static_cast<size_t>(u)] = H5S_UNLIMITED;
        if (ix.unlimited == 2 && rank == 1) d.maxdims[0] = H5S_UNLIMITED;
        d.shuffle = fl.shuffle;
        d.deflate = fl.deflate;
        d.fletcher32 = fl.fletcher;
        write_dataset(f, d, static_cast<uint32_t>(++n));
      }
    }
    for (const auto& fl : filts)
      for (int rank = 1; rank <= 3; ++rank) check_ranges(e, f.path, std::string(fl.name) + "_r" + std::to_string(rank));
  }
}

TEST_CASE("single-chunk, implicit and partially written chunked datasets", "[core]") {
  TestCore e(small_opts());
  FileSpec f;
  f.path = scratch_path("special_chunked.h5");
  f.latest = true;
  DsetSpec single;
  single.name = "single";
  single.dims = {10, 20};
  single.chunks = {10, 20};
  write_dataset(f, single);
  DsetSpec single_f = single;
  single_f.name = "single_filtered";
  single_f.deflate = true;
  write_dataset(f, single_f);
  DsetSpec implicit;
  implicit.name = "implicit";
  implicit.dims = {50, 30};
  implicit.chunks = {7, 8};
  implicit.alloc_early = true;
  write_dataset(f, implicit);
  DsetSpec partial;
  partial.name = "partial";
  partial.dims = {100, 40};
  partial.chunks = {10, 10};
  partial.deflate = true;
  partial.fill_value = {0x34, 0x12};
  partial.write_start = {15, 5};
  partial.write_count = {30, 12};
  write_dataset(f, partial);
  DsetSpec unwritten = partial;
  unwritten.name = "never_written";
  unwritten.write_data = false;
  write_dataset(f, unwritten);
  DsetSpec edge = partial;
  edge.name = "dont_filter_edges";
  edge.dims = {95, 41};
  edge.write_start.clear();
  edge.write_count.clear();
  edge.shuffle = true;
  edge.dont_filter_partial = true;
  write_dataset(f, edge);
  for (auto name : {"single", "single_filtered", "implicit", "partial", "never_written", "dont_filter_edges"})
    check_ranges(e, f.path, name);
}

TEST_CASE("contiguous and compact datasets, user block, small offsets", "[core]") {
  TestCore e(small_opts());
  for (hsize_t ub : {hsize_t(0), hsize_t(512), hsize_t(4096)}) {
    FileSpec f;
    f.path = scratch_path("contig_ub" + std::to_string(ub) + ".h5");
    f.userblock = ub;
    DsetSpec c;
    c.name = "contig";
    c.layout = "contiguous";
    c.dims = {300, 500};
    write_dataset(f, c);
    DsetSpec k;
    k.name = "compact";
    k.layout = "compact";
    k.type = H5T_IEEE_F64BE;
    k.dims = {5, 7};
    write_dataset(f, k);
    DsetSpec u = c;
    u.name = "contig_unallocated";
    u.write_data = false;
    u.fill_value = {1, 2};
    write_dataset(f, u);
    DsetSpec ch;
    ch.name = "chunked";
    ch.dims = {40, 40};
    ch.chunks = {16, 16};
    ch.shuffle = ch.deflate = true;
    write_dataset(f, ch);
    for (auto name : {"contig", "compact", "contig_unallocated", "chunked"}) check_ranges(e, f.path, name);
  }
  FileSpec f4;
  f4.path = scratch_path("sizes4.h5");
  f4.sizeof_offsets = 4;
  f4.sizeof_lengths = 4;
  DsetSpec ch;
  ch.name = "chunked";
  ch.dims = {64, 64};
  ch.chunks = {10, 10};
  ch.deflate = true;
  write_dataset(f4, ch);
  check_ranges(e, f4.path, "chunked");
}

TEST_CASE("element types: byte orders, floats, compounds, arrays, strings, bools", "[core]") {
  TestCore e(small_opts());
  FileSpec f;
  f.path = scratch_path("types.h5");
  std::vector<std::pair<std::string, hid_t>> types = {
      {"u1", H5T_STD_U8LE},   {"i1", H5T_STD_I8LE},    {"i2be", H5T_STD_I16BE}, {"u4", H5T_STD_U32LE},
      {"i8be", H5T_STD_I64BE}, {"u8", H5T_STD_U64LE},  {"f4be", H5T_IEEE_F32BE}, {"f8", H5T_IEEE_F64LE}};
  hid_t cmp = H5Tcreate(H5T_COMPOUND, 24);
  H5Tinsert(cmp, "a", 0, H5T_STD_I32LE);
  H5Tinsert(cmp, "b", 8, H5T_IEEE_F64BE);
  hsize_t adims[1] = {3};
  hid_t arr = H5Tarray_create2(H5T_STD_U16LE, 1, adims);
  H5Tinsert(cmp, "c", 16, arr);
  types.emplace_back("compound", cmp);
  types.emplace_back("array", arr);
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, 7);
  types.emplace_back("string", str);
  hid_t cplx = H5Tcreate(H5T_COMPOUND, 16);
  H5Tinsert(cplx, "r", 0, H5T_IEEE_F64LE);
  H5Tinsert(cplx, "i", 8, H5T_IEEE_F64LE);
  types.emplace_back("complex", cplx);
  hid_t boolean = H5Tenum_create(H5T_STD_I8LE);
  int8_t v0 = 0, v1 = 1;
  H5Tenum_insert(boolean, "FALSE", &v0);
  H5Tenum_insert(boolean, "TRUE", &v1);
  types.emplace_back("bool", boolean);
  for (const auto& [name, t] : types) {
    for (bool chunked : {false, true}) {
      DsetSpec d;
      d.name = name + (chunked ? "_chunked" : "_contig");
      d.type = t;
      d.dims = {23, 5};
      d.layout = chunked ? "chunked" : "contiguous";
      d.chunks = {4, 3};
      d.shuffle = d.deflate = chunked;
      write_dataset(f, d);
    }
  }
  DsetSpec scalar;
  scalar.name = "scalar";
  scalar.type = H5T_IEEE_F64LE;
  scalar.layout = "contiguous";
  write_dataset(f, scalar);
  DsetSpec empty;
  empty.name = "empty";
  empty.dims = {0, 4};
  empty.maxdims = {H5S_UNLIMITED, 4};
  empty.chunks = {8, 4};
  write_dataset(f, empty);

  for (const auto& [name, t] : types) {
    check_ranges(e, f.path, name + "_contig");
    check_ranges(e, f.path, name + "_chunked");
  }
  check_ranges(e, f.path, "scalar");
  check_ranges(e, f.path, "empty");

  auto file = e.open_file(f.path);
  CHECK(file->dataset_info("/u1_contig")->dtype.typestr == "|u1");
  CHECK(file->dataset_info("/i2be_contig")->dtype.typestr == ">i2");
  CHECK(file->dataset_info("/f4be_contig")->dtype.typestr == ">f4");
  CHECK(file->dataset_info("/complex_contig")->dtype.typestr == "<c16");
  CHECK(file->dataset_info("/bool_contig")->dtype.typestr == "|b1");
  CHECK(file->dataset_info("/string_contig")->dtype.typestr == "|S7");
  CHECK(file->dataset_info("/array_contig")->shape == Shape{23, 5, 3});
  CHECK(npy_descr_literal(file->dataset_info("/compound_contig")->dtype) ==
        "[('a', '<i4'), ('', '|V4'), ('b', '>f8'), ('c', '<u2', (3,)), ('', '|V2')]");
  CHECK(file->dataset_info("/scalar")->shape.empty());
  H5Tclose(cmp);
  H5Tclose(arr);
  H5Tclose(str);
  H5Tclose(cplx);
  H5Tclose(boolean);
}

TEST_CASE("corrupt chunks fail with an error naming file, dataset and chunk; others stay readable", "[core]") {
  FileSpec f;
  f.path = scratch_path("corrupt.h5");
  DsetSpec d;
  d.name = "data";
  d.dims = {8, 64, 64};
  d.chunks = {1, 64, 64};
  d.shuffle = d.deflate = true;
  write_dataset(f, d);
  // Find chunk 3's bytes through the library and damage them.
  hid_t fid = H5Fopen(f.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(fid, "/data", H5P_DEFAULT);
  hsize_t off[3] = {3, 0, 0};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  REQUIRE(H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &size) >= 0);
  H5Dclose(ds);
  H5Fclose(fid);
  auto oracle = h5_read_all(f.path, "/data");
  {
    FILE* fp = std::fopen(f.path.c_str(), "r+b");
    REQUIRE(fp);
    std::fseek(fp, static_cast<long>(addr + size / 2), SEEK_SET);
    const char junk[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    std::fwrite(junk, 1, sizeof junk, fp);
    std::fclose(fp);
  }
  TestCore e(small_opts());
  auto a = e.open_file(f.path)->dataset_array("/data");
  const uint64_t frame = 64 * 64 * 2;
  std::vector<uint8_t> buf(frame);
  try {
    e.read_bytes(*a, 3 * frame, frame, buf.data());
    FAIL("corrupt chunk read without error");
  } catch (const Error& err) {
    CHECK(err.code() == EIO);
    std::string msg = err.what();
    CHECK(msg.find("corrupt.h5") != std::string::npos);
    CHECK(msg.find("/data") != std::string::npos);
    CHECK(msg.find("chunk (3,0,0)") != std::string::npos);
  }
  for (uint64_t i : {0u, 1u, 2u, 4u, 7u}) {
    e.read_bytes(*a, i * frame, frame, buf.data());
    REQUIRE(std::memcmp(buf.data(), oracle.data() + i * frame, frame) == 0);
  }
}

TEST_CASE("truncated files give EIO, not wrong bytes", "[core]") {
  FileSpec f;
  f.path = scratch_path("truncated.h5");
  DsetSpec d;
  d.name = "data";
  d.layout = "contiguous";
  d.dims = {1000, 100};
  write_dataset(f, d);
  struct stat st;
  REQUIRE(::stat(f.path.c_str(), &st) == 0);
  REQUIRE(::truncate(f.path.c_str(), st.st_size - 50000) == 0);
  // libhdf5 itself refuses to open a file shorter than its superblock says; either way the
  // error is EIO and names the file.
  TestCore e(small_opts());
  try {
    auto a = e.open_file(f.path)->dataset_array("/data");
    std::vector<uint8_t> buf(a->nbytes());
    e.read_bytes(*a, 0, buf.size(), buf.data());
    FAIL("truncated file read without error");
  } catch (const Error& err) {
    CHECK(err.code() == EIO);
    CHECK(std::string(err.what()).find("truncated.h5") != std::string::npos);
  }
}
