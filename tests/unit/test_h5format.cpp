// core/fmt: layout message and chunk index parsers, checked against libhdf5 as the oracle
// (H5Dget_chunk_info / H5Dget_chunk_storage_size / H5Pget_chunk) on fixtures written with the
// C API for every index type, plus ChunkMap unit tests and hand-built object headers.
#include <catch2/catch.hpp>
#include <hdf5.h>

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "core/array/region.h"
#include "core/error.h"
#include "core/fmt/chunk_index.h"
#include "core/fmt/checksum.h"
#include "core/fmt/cursor.h"
#include "tests/support/h5format_fixtures.h"

using namespace h5d;
using namespace h5d::fmt;
using namespace h5d::testing;

namespace {

constexpr hsize_t U = H5S_UNLIMITED;

struct Parsed {
  LayoutInfo layout;
  ChunkMap map;
};

Parsed parse(const ByteSource& src, const Oracle& o) {
  Parsed p;
  p.layout = read_layout(src, o.geo, o.ohdr_addr);
  p.map = read_chunk_map(src, o.geo, p.layout, o.dims, o.maxdims, o.elem_size, o.filtered);
  return p;
}

// H5Dget_chunk_info(_by_coord) in 1.10.8 returns addresses relative to the base address (it
// does not add the user block, unlike H5Dget_offset): verified by the user block cases below.
uint64_t oracle_abs(const Oracle& o, haddr_t a) { return a + o.geo.base; }

void compare_with_oracle(const Oracle& o, const Parsed& p) {
  REQUIRE(p.layout.layout_class == LayoutClass::Chunked);
  REQUIRE(p.layout.chunk_dims == o.chunk);
  REQUIRE(p.layout.chunk_elem_size == o.elem_size);
  CHECK(p.layout.dont_filter_partial_edge_chunks ==
        bool(o.chunk_opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS));
  REQUIRE(p.map.allocated() == o.nchunks);
  // Valid files: no chunk overlaps another or the index, none lies beyond the extent.
  CHECK(p.map.damaged() == 0);
  CHECK(p.map.beyond_extent == 0);
  std::vector<uint64_t> scaled(o.chunk.size());
  if (o.complete) REQUIRE(o.chunks.size() == o.nchunks);
  for (const OracleChunk& c : o.chunks) {
    for (size_t k = 0; k < scaled.size(); ++k) scaled[k] = c.offset[k] / o.chunk[k];
    const ChunkLoc* loc = p.map.find(p.map.linear(scaled.data()));
    INFO("chunk at element offset " << c.offset[0] << (c.offset.size() > 1 ? ",..." : ""));
    REQUIRE(loc);
    CHECK(loc->addr == oracle_abs(o, c.addr));
    CHECK(loc->size == c.size);
    CHECK(loc->filter_mask == c.filter_mask);
  }
  if (!o.complete) {  // every chunk of the grid: allocated or not, and its stored size
    REQUIRE(o.storage_sizes.size() == p.map.grid_size());
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < o.storage_sizes.size(); ++i) {
      const ChunkLoc* loc = p.map.find(i);
      const uint64_t ours = loc ? loc->size : 0;
      mismatches += ours != o.storage_sizes[i];
    }
    CHECK(mismatches == 0);
  }
}

// Independent of the index APIs: every chunk our map lists must hold exactly the values that
// H5Dread returns for its region (raw, or zlib-inflated when deflate was applied to it).
void verify_chunk_contents(const std::string& path, const Oracle& o, const Parsed& p, bool shuffle) {
  if (shuffle) return;
  const size_t rank = o.dims.size();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "data", H5P_DEFAULT);
  std::vector<int32_t> all(product(o.dims));
  if (!all.empty()) REQUIRE(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  PreadSource src(path);
  const uint64_t chunk_elems = product(o.chunk);
  std::vector<int32_t> chunk(chunk_elems);
  std::vector<uint8_t> stored;
  uint64_t checked = 0, bad = 0;
  p.map.for_each([&](uint64_t lin, const ChunkLoc& loc) {
    Shape scaled(rank);
    uint64_t rest = lin;
    bool edge = false;
    for (size_t k = rank; k-- > 0;) {
      scaled[k] = rest % p.map.grid()[k];
      rest /= p.map.grid()[k];
      edge |= (scaled[k] + 1) * o.chunk[k] > o.dims[k];
    }
    stored.resize(loc.size);
    src.read_at(loc.addr, stored.data(), stored.size());
    const bool raw = !o.filtered || (loc.filter_mask & 1) || (edge && p.layout.dont_filter_partial_edge_chunks);
    if (raw) {
      REQUIRE(loc.size == chunk_elems * 4);
      std::memcpy(chunk.data(), stored.data(), stored.size());
    } else {
      uLongf n = chunk_elems * 4;
      REQUIRE(uncompress(reinterpret_cast<Bytef*>(chunk.data()), &n, stored.data(), stored.size()) == Z_OK);
      REQUIRE(n == chunk_elems * 4);
    }
    // Compare the valid part of the chunk, element by element.
    for (uint64_t i = 0; i < chunk_elems; ++i) {
      uint64_t r = i, flat = 0, stride = 1;
      bool inside = true;
      for (size_t k = rank; k-- > 0;) {
        const uint64_t c = scaled[k] * o.chunk[k] + r % o.chunk[k];
        r /= o.chunk[k];
        inside &= c < o.dims[k];
        flat += c * stride;
        stride *= o.dims[k];
      }
      if (inside) bad += chunk[i] != all[flat];
    }
    ++checked;
  });
  CHECK(checked == p.map.allocated());
  CHECK(bad == 0);
}

// 1.10.8's H5Dget_chunk_info and H5Dget_chunk_info_by_coord both misplace chunks of extensible
// arrays whose unlimited dimension is not the first one (their coordinate <-> index mapping is
// not the swizzled one the writer uses); H5Dread is right, so verify_chunk_contents decides.
bool oracle_misplaces(const Oracle& o, ChunkIndexType t) {
  return t == ChunkIndexType::ExtensibleArray && o.maxdims[0] != ~uint64_t(0);
}

struct Case {
  const char* name;
  FixtureSpec spec;
  ChunkIndexType expect;
};

FixtureSpec spec(bool latest, std::vector<hsize_t> dims, std::vector<hsize_t> maxdims,
                 std::vector<hsize_t> chunk, bool deflate, WritePattern pattern = WritePattern::All) {
  FixtureSpec s;
  s.latest = latest;
  s.dims = std::move(dims);
  s.maxdims = std::move(maxdims);
  s.chunk = std::move(chunk);
  s.deflate = deflate;
  s.pattern = pattern;
  return s;
}

template <class F>
FixtureSpec with(FixtureSpec s, F&& f) {
  f(s);
  return s;
}

std::vector<Case> oracle_cases() {
  using W = WritePattern;
  const auto E = ChunkIndexType::BTreeV1, FA = ChunkIndexType::FixedArray,
             EA = ChunkIndexType::ExtensibleArray, B2 = ChunkIndexType::BTreeV2,
             SC = ChunkIndexType::SingleChunk, IM = ChunkIndexType::Implicit;
  std::vector<Case> v;
  for (bool deflate : {false, true}) {
    // libver earliest: v1 B-tree whatever the maximum dimensions; object header v1.
    v.push_back({"earliest rank1", spec(false, {100}, {}, {7}, deflate), E});
    v.push_back({"earliest rank2 partial", spec(false, {20, 33}, {}, {6, 5}, deflate, W::EveryThird), E});
    v.push_back({"earliest rank3", spec(false, {9, 8, 7}, {}, {4, 3, 2}, deflate), E});
    v.push_back({"earliest rank4 half", spec(false, {5, 6, 7, 8}, {}, {2, 3, 4, 3}, deflate, W::FirstHalf), E});
    v.push_back({"earliest unlimited", spec(false, {50, 6}, {U, U}, {3, 4}, deflate), E});
    v.push_back({"earliest deep tree", spec(false, {3000}, {}, {2}, deflate, W::EveryThird), E});
    // libver latest: object header v2, layout v4.
    v.push_back({"latest fixed rank1", spec(true, {100}, {}, {7}, deflate), FA});
    v.push_back({"latest fixed rank2 partial", spec(true, {20, 33}, {}, {6, 5}, deflate, W::EveryThird), FA});
    v.push_back({"latest fixed rank3", spec(true, {9, 8, 7}, {}, {4, 3, 2}, deflate), FA});
    v.push_back({"latest fixed rank4", spec(true, {5, 6, 7, 8}, {}, {2, 3, 4, 3}, deflate, W::FirstHalf), FA});
    v.push_back({"latest fixed below max", spec(true, {10, 7}, {20, 9}, {3, 2}, deflate, W::EveryThird), FA});
    v.push_back({"latest fixed paged", spec(true, {3001}, {}, {2}, deflate, W::EveryThird), FA});
    v.push_back({"latest fixed paged first half", spec(true, {2500, 2}, {}, {1, 2}, deflate, W::FirstHalf), FA});
    v.push_back({"latest single chunk", spec(true, {10, 12}, {}, {10, 12}, deflate), SC});
    v.push_back({"latest EA rank1", spec(true, {100}, {U}, {7}, deflate), EA});
    v.push_back({"latest EA rank2 unlim dim0", spec(true, {40, 9}, {U, 9}, {3, 4}, deflate, W::EveryThird), EA});
    v.push_back({"latest EA rank3 unlim dim1", spec(true, {5, 30, 6}, {5, U, 8}, {2, 4, 5}, deflate), EA});
    v.push_back({"latest EA rank4 unlim dim3", spec(true, {3, 4, 2, 21}, {3, 4, 2, U}, {2, 3, 1, 2}, deflate, W::FirstHalf), EA});
    v.push_back({"latest EA super blocks", spec(true, {2600}, {U}, {1}, deflate, W::EveryThird), EA});
    v.push_back({"latest BT2 rank2", spec(true, {30, 40}, {U, U}, {3, 2}, deflate, W::EveryThird), B2});
    v.push_back({"latest BT2 rank3", spec(true, {7, 9, 11}, {U, 12, U}, {2, 2, 3}, deflate), B2});
    v.push_back({"latest BT2 rank4", spec(true, {3, 4, 5, 6}, {U, U, U, U}, {2, 2, 2, 2}, deflate), B2});
    v.push_back({"latest none written", spec(true, {30, 40}, {U, U}, {3, 2}, deflate, W::None), B2});
    v.push_back({"latest EA none written", spec(true, {30}, {U}, {3}, deflate, W::None), EA});
    v.push_back({"earliest none written", spec(false, {30}, {}, {3}, deflate, W::None), E});
    // User blocks, 4-byte offsets, attributes, creation order, partial edge chunk flag.
    for (bool latest : {false, true}) {
      v.push_back({"userblock 512", with(spec(latest, {50, 6}, {U, 6}, {3, 4}, deflate), [](FixtureSpec& s) { s.userblock = 512; }), latest ? EA : E});
      v.push_back({"userblock 1024 fixed", with(spec(latest, {50, 6}, {}, {3, 4}, deflate), [](FixtureSpec& s) { s.userblock = 1024; }), latest ? FA : E});
      v.push_back({"userblock 1024 bt2", with(spec(latest, {50, 6}, {U, U}, {3, 4}, deflate), [](FixtureSpec& s) { s.userblock = 1024; }), latest ? B2 : E});
      v.push_back({"many attributes", with(spec(latest, {50, 6}, {}, {3, 4}, deflate), [](FixtureSpec& s) { s.n_attrs = 60; }), latest ? FA : E});
      v.push_back({"direct chunk writes with masks", with(spec(latest, {40, 9}, {U, 9}, {3, 4}, true, W::EveryThird), [](FixtureSpec& s) { s.direct_masks = true; }), latest ? EA : E});
      v.push_back({"direct chunk writes with masks fixed", with(spec(latest, {40, 9}, {}, {3, 4}, true), [](FixtureSpec& s) { s.direct_masks = true; }), latest ? FA : E});
      v.push_back({"direct chunk writes with masks bt2", with(spec(latest, {40, 9}, {U, U}, {3, 4}, true), [](FixtureSpec& s) { s.direct_masks = true; }), latest ? B2 : E});
    }
    v.push_back({"creation order tracked", with(spec(true, {50, 6}, {}, {3, 4}, deflate), [](FixtureSpec& s) { s.n_attrs = 20; s.track_order = true; }), FA});
    v.push_back({"dont filter partial fixed", with(spec(true, {20, 33}, {}, {6, 5}, deflate), [](FixtureSpec& s) { s.dont_filter_partial = true; }), FA});
    v.push_back({"dont filter partial EA", with(spec(true, {20, 33}, {U, 33}, {6, 5}, deflate), [](FixtureSpec& s) { s.dont_filter_partial = true; }), EA});
    v.push_back({"dont filter partial BT2", with(spec(true, {20, 33}, {U, U}, {6, 5}, deflate), [](FixtureSpec& s) { s.dont_filter_partial = true; }), B2});
    v.push_back({"dont filter partial single", with(spec(true, {20, 33}, {}, {20, 33}, deflate), [](FixtureSpec& s) { s.dont_filter_partial = true; }), SC});
    v.push_back({"shuffle", with(spec(true, {20, 33}, {U, 33}, {6, 5}, deflate), [](FixtureSpec& s) { s.shuffle = true; }), EA});
  }
  // Implicit index: fixed maximum dims, early allocation, no filters.
  v.push_back({"implicit rank2", with(spec(true, {20, 33}, {}, {6, 5}, false, W::EveryThird), [](FixtureSpec& s) { s.alloc_early = true; }), IM});
  v.push_back({"implicit below max", with(spec(true, {10, 7}, {20, 9}, {3, 2}, false, W::None), [](FixtureSpec& s) { s.alloc_early = true; }), IM});
  v.push_back({"implicit rank3 userblock", with(spec(true, {9, 8, 7}, {}, {4, 3, 2}, false), [](FixtureSpec& s) { s.alloc_early = true; s.userblock = 512; }), IM});
  v.push_back({"early single chunk", with(spec(true, {10, 12}, {}, {10, 12}, false, W::None), [](FixtureSpec& s) { s.alloc_early = true; }), SC});
  v.push_back({"earliest early alloc", with(spec(false, {20, 33}, {}, {6, 5}, false, W::None), [](FixtureSpec& s) { s.alloc_early = true; }), E});
  return v;
}

void run_case(const Case& c, const std::string& file) {
  const std::string path = h5format_tmp_path(file);
  create_fixture(path, c.spec);
  Oracle o = query_oracle(path);
  PreadSource src(path);
  Parsed p = parse(src, o);
  CHECK(p.layout.index_type == c.expect);
  CHECK(p.layout.version == (c.spec.latest ? 4 : 3));
  if (oracle_misplaces(o, p.layout.index_type))
    CHECK(p.map.allocated() == o.nchunks);
  else
    compare_with_oracle(o, p);
  verify_chunk_contents(path, o, p, c.spec.shuffle);
  // The same bytes through a MemorySource give the same map.
  MemorySource mem(read_file_bytes(path), path);
  Parsed q = parse(mem, o);
  CHECK(q.map.allocated() == p.map.allocated());
}

struct QuietHdf5 {
  QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};

}  // namespace

TEST_CASE("h5format: chunk maps equal libhdf5's for every index type", "[h5format]") {
  QuietHdf5 quiet;
  const auto cases = oracle_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    DYNAMIC_SECTION(c.name << (c.spec.deflate ? " deflate" : "") << (c.spec.latest ? " latest" : " earliest")
                           << " #" << i) {
      run_case(c, "oracle_" + std::to_string(i) + ".h5");
    }
  }
}

TEST_CASE("h5format: 4-byte offsets and lengths", "[h5format]") {
  QuietHdf5 quiet;
  for (bool latest : {false, true}) {
    for (int kind = 0; kind < 3; ++kind) {
      FixtureSpec s = spec(latest, {40, 9}, kind == 0 ? std::vector<hsize_t>{} : kind == 1 ? std::vector<hsize_t>{U, 9} : std::vector<hsize_t>{U, U},
                           {3, 4}, kind == 1, WritePattern::EveryThird);
      s.sizeof_offsets = 4;
      s.userblock = kind == 2 ? 512 : 0;
      const std::string path = h5format_tmp_path("offsets4_" + std::to_string(latest) + std::to_string(kind) + ".h5");
      try {
        create_fixture(path, s);
      } catch (const std::runtime_error& e) {
        WARN("libhdf5 refused 4-byte offsets (latest=" << latest << "): " << e.what());
        continue;
      }
      Oracle o;
      try {
        o = query_oracle(path);
      } catch (const std::runtime_error& e) {
        WARN("libhdf5 cannot reopen its own file with 4-byte offsets (latest=" << latest << ", kind=" << kind << "): " << e.what());
        continue;
      }
      REQUIRE(o.geo.sizeof_offsets == 4);
      PreadSource src(path);
      Parsed p = parse(src, o);
      compare_with_oracle(o, p);
      verify_chunk_contents(path, o, p, false);
    }
  }
}

TEST_CASE("h5format: large indexes (paged extensible array data blocks, deep v2 B-tree)", "[h5format]") {
  QuietHdf5 quiet;
  struct Big {
    const char* name;
    FixtureSpec spec;
    ChunkIndexType expect;
  };
  const Big bigs[] = {
      // > 131k elements: extensible array super blocks with paged data blocks; Tail leaves the
      // early super blocks unallocated and some pages uninitialized.
      {"EA paged tail", spec(true, {160000}, {U}, {1}, false, WritePattern::Tail), ChunkIndexType::ExtensibleArray},
      {"EA paged all filtered", spec(true, {140000}, {U}, {1}, true, WritePattern::All), ChunkIndexType::ExtensibleArray},
      {"BT2 depth 2", spec(true, {160, 150}, {U, U}, {1, 1}, false, WritePattern::All), ChunkIndexType::BTreeV2},
      {"BT2 depth 2 filtered", spec(true, {160, 150}, {U, U}, {1, 1}, true, WritePattern::All), ChunkIndexType::BTreeV2},
      {"FA paged tail", spec(true, {40000}, {}, {1}, false, WritePattern::Tail), ChunkIndexType::FixedArray},
      {"v1 B-tree deep", spec(false, {40000}, {U}, {1}, true, WritePattern::All), ChunkIndexType::BTreeV1},
  };
  int i = 0;
  for (const Big& b : bigs) {
    DYNAMIC_SECTION(b.name) {
      const std::string path = h5format_tmp_path("big_" + std::to_string(i) + ".h5");
      create_fixture(path, b.spec);
      Oracle o = query_oracle(path, 0, 30);
      PreadSource src(path);
      Parsed p = parse(src, o);
      CHECK(p.layout.index_type == b.expect);
      compare_with_oracle(o, p);
      verify_chunk_contents(path, o, p, false);
    }
    ++i;
  }
}

// A source that remembers the prefetch hints it was given and which reads they announced.
class HintedSource final : public ByteSource {
 public:
  explicit HintedSource(std::vector<uint8_t> b) : mem_(std::move(b), "hinted.h5") {}
  void read_at(uint64_t off, void* buf, size_t n) const override {
    bool covered = false;
    for (const auto& [h, len] : hints_) covered |= off >= h && off + n <= h + len;
    ++(covered ? hinted_reads : unhinted_reads);
    mem_.read_at(off, buf, n);
  }
  uint64_t size() const override { return mem_.size(); }
  std::string name() const override { return mem_.name(); }
  void prefetch(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const override {
    ++hint_calls;
    hints_.insert(hints_.end(), ranges.begin(), ranges.end());
  }
  mutable unsigned hinted_reads = 0, unhinted_reads = 0, hint_calls = 0;

 private:
  MemorySource mem_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> hints_;
};

TEST_CASE("h5format: every chunk index announces the nodes and blocks it reads next", "[h5format]") {
  // On slow storage a cold index costs a round trip per structure read one after another; a
  // parser that announces a level's nodes or blocks before reading them costs one per level.
  // Each read of the index below its first levels must lie in a range announced before it.
  QuietHdf5 quiet;
  struct Big {
    const char* name;
    FixtureSpec spec;
    ChunkIndexType expect;
    unsigned max_unhinted;  // reads nothing announces: header, root node or index block
    unsigned max_hints;     // one per level below that
  };
  const Big bigs[] = {
      {"v1 B-tree, 1,500 chunks", spec(false, {3000}, {U}, {2}, true), ChunkIndexType::BTreeV1, 2, 1},
      {"extensible array, super blocks", spec(true, {2600}, {U}, {1}, true), ChunkIndexType::ExtensibleArray, 2, 2},
      {"v2 B-tree depth 2", spec(true, {160, 150}, {U, U}, {1, 1}, true), ChunkIndexType::BTreeV2, 2, 2},
  };
  int i = 0;
  for (const Big& b : bigs) {
    DYNAMIC_SECTION(b.name) {
      const std::string path = h5format_tmp_path("hinted_" + std::to_string(i) + ".h5");
      create_fixture(path, b.spec);
      Oracle o = query_oracle(path, 0, 30);
      HintedSource src(read_file_bytes(path));
      const LayoutInfo layout = read_layout(src, o.geo, o.ohdr_addr);
      REQUIRE(layout.index_type == b.expect);
      src.hinted_reads = src.unhinted_reads = 0;
      Parsed p;
      p.layout = layout;
      p.map = read_chunk_map(src, o.geo, layout, o.dims, o.maxdims, o.elem_size, o.filtered);
      compare_with_oracle(o, p);
      INFO("hinted reads " << src.hinted_reads << ", unhinted " << src.unhinted_reads << ", hints " << src.hint_calls);
      CHECK(src.unhinted_reads <= b.max_unhinted);
      CHECK(src.hinted_reads >= 10);  // the index has many structures
      CHECK(src.hint_calls <= b.max_hints);  // a level at once
    }
    ++i;
  }
}

TEST_CASE("h5format: contiguous and compact layouts", "[h5format]") {
  QuietHdf5 quiet;
  for (bool latest : {false, true}) {
    for (hsize_t ub : {hsize_t(0), hsize_t(512)}) {
      const std::string path = h5format_tmp_path("contig_" + std::to_string(latest) + "_" + std::to_string(ub) + ".h5");
      hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
      if (ub) H5Pset_userblock(fcpl, ub);
      hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
      if (latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
      hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
      hsize_t dims[2] = {10, 20};
      hid_t sp = H5Screate_simple(2, dims, nullptr);
      std::vector<int32_t> data(200, 7);
      hid_t d = H5Dcreate2(f, "data", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
      hid_t unalloc = H5Dcreate2(f, "empty", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_layout(dcpl, H5D_COMPACT);
      hid_t c = H5Dcreate2(f, "compact", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      H5Dwrite(c, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
      const haddr_t offset = H5Dget_offset(d);
      H5O_info_t info_d, info_u, info_c;
      H5Oget_info2(d, &info_d, H5O_INFO_BASIC);
      H5Oget_info2(unalloc, &info_u, H5O_INFO_BASIC);
      H5Oget_info2(c, &info_c, H5O_INFO_BASIC);
      H5Dclose(c);
      H5Dclose(unalloc);
      H5Dclose(d);
      H5Pclose(dcpl);
      H5Sclose(sp);
      H5Fclose(f);
      H5Pclose(fapl);
      H5Pclose(fcpl);

      PreadSource src(path);
      FileGeometry geo;
      geo.base = ub;
      LayoutInfo l = read_layout(src, geo, info_d.addr);
      CHECK(l.layout_class == LayoutClass::Contiguous);
      CHECK(l.contiguous_addr == offset);  // H5Dget_offset includes the user block
      CHECK(l.contiguous_size == 800);
      LayoutInfo lu = read_layout(src, geo, info_u.addr);
      CHECK(lu.layout_class == LayoutClass::Contiguous);
      CHECK(lu.contiguous_addr == kUndefAddr);
      LayoutInfo lc = read_layout(src, geo, info_c.addr);
      CHECK(lc.layout_class == LayoutClass::Compact);
      CHECK_THROWS_AS(read_chunk_map(src, geo, lc, {10, 20}, {10, 20}, 4, false), h5d::Error);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ChunkMap

TEST_CASE("h5format: ChunkMap grid, linear index, set and find", "[h5format]") {
  ChunkMap m({10, 7}, {3, 2});
  CHECK(m.grid() == Shape{4, 4});
  CHECK(m.grid_size() == 16);
  uint64_t s[2] = {2, 3};
  CHECK(m.linear(s) == 11);
  CHECK(m.find(11) == nullptr);
  m.set(s, ChunkLoc{100, 24, 0});
  REQUIRE(m.find(11));
  CHECK(m.find(11)->addr == 100);
  CHECK(m.allocated() == 1);
  uint64_t outside[2] = {4, 0};
  m.set(outside, ChunkLoc{200, 24, 0});  // beyond the extent: ignored
  CHECK(m.allocated() == 1);
  CHECK_THROWS_AS(m.set(s, ChunkLoc{300, 24, 0}), h5d::Error);
  int n = 0;
  m.for_each([&](uint64_t i, const ChunkLoc& loc) {
    CHECK(i == 11);
    CHECK(loc.size == 24);
    ++n;
  });
  CHECK(n == 1);
  CHECK(ChunkMap({0, 5}, {2, 2}).grid_size() == 0);
  CHECK_THROWS_AS(ChunkMap({4}, {0}), h5d::Error);
}

TEST_CASE("h5format: ChunkMap keeps enormous grids sparse", "[h5format]") {
  ChunkMap m({uint64_t(1) << 40, 1000}, {1, 1});
  CHECK(m.sparse());
  CHECK(m.grid_size() == (uint64_t(1) << 40) * 1000);
  uint64_t a[2] = {uint64_t(1) << 39, 5}, b[2] = {3, 999};
  m.set(a, ChunkLoc{10, 4, 0});
  m.set(b, ChunkLoc{20, 4, 1});
  CHECK(m.allocated() == 2);
  REQUIRE(m.find(m.linear(a)));
  CHECK(m.find(m.linear(b))->filter_mask == 1);
  std::vector<uint64_t> order;
  m.for_each([&](uint64_t i, const ChunkLoc&) { order.push_back(i); });
  CHECK(order == std::vector<uint64_t>{m.linear(b), m.linear(a)});
  CHECK_THROWS_AS(m.set(a, ChunkLoc{30, 4, 0}), h5d::Error);
  CHECK_THROWS_AS(ChunkMap({uint64_t(1) << 40, uint64_t(1) << 40}, {1, 1}), h5d::Error);
}

TEST_CASE("h5format: lookup3 checksum known values", "[h5format]") {
  // Bob Jenkins' published test vectors for hashlittle().
  CHECK(checksum_lookup3(reinterpret_cast<const uint8_t*>(""), 0, 0) == 0xdeadbeefu);
  CHECK(checksum_lookup3(reinterpret_cast<const uint8_t*>("Four score and seven years ago"), 30, 0) == 0x17770551u);
  CHECK(checksum_lookup3(reinterpret_cast<const uint8_t*>("Four score and seven years ago"), 30, 1) == 0xcd628161u);
}

// ---------------------------------------------------------------------------------------------
// Hand-built object headers: the layout message only in a continuation block.

namespace {

struct Bytes {
  std::vector<uint8_t> b;
  void u(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void s(const char* sig) { b.insert(b.end(), sig, sig + 4); }
  void pad_to(size_t n) { b.resize(n, 0); }
  void checksum(size_t from) { u(checksum_lookup3(b.data() + from, b.size() - from), 4); }
};

// Layout message v4, chunked, fixed array index, chunk 6x5 of 4-byte elements.
std::vector<uint8_t> layout_v4_fixed_array(uint64_t index_addr) {
  Bytes m;
  m.u(4, 1);  // version
  m.u(2, 1);  // chunked
  m.u(1, 1);  // flags: don't filter partial edge chunks
  m.u(3, 1);  // dimensionality incl. element size
  m.u(2, 1);  // encoded length of dimension sizes
  m.u(6, 2);
  m.u(5, 2);
  m.u(4, 2);
  m.u(3, 1);   // fixed array
  m.u(10, 1);  // page bits
  m.u(index_addr, 8);
  return m.b;
}

}  // namespace

TEST_CASE("h5format: layout message found after a v1 continuation block", "[h5format]") {
  Bytes f;
  f.pad_to(64);  // object header at 64
  f.u(1, 1);
  f.u(0, 1);
  f.u(3, 2);   // messages
  f.u(1, 4);   // refcount
  f.u(40, 4);  // header size
  f.u(0, 4);   // alignment padding
  f.u(0, 2), f.u(8, 2), f.u(0, 4), f.u(0, 8);                   // NIL message
  f.u(0x10, 2), f.u(16, 2), f.u(0, 4), f.u(200, 8), f.u(48, 8);  // continuation -> 200, 48 bytes
  f.pad_to(200);
  f.u(0x0c, 2), f.u(8, 2), f.u(0, 4), f.u(0, 8);  // an "attribute" (skipped)
  f.u(0x08, 2), f.u(24, 2), f.u(0, 4);             // layout v3 contiguous
  f.u(3, 1), f.u(1, 1), f.u(4096, 8), f.u(800, 8), f.u(0, 6);
  f.pad_to(300);
  for (uint64_t base : {0u, 1000u}) {
    std::vector<uint8_t> bytes(base, 0xab);
    bytes.insert(bytes.end(), f.b.begin(), f.b.end());
    bytes.resize(bytes.size() + 5000);
    MemorySource src(bytes, "synthetic-v1.h5");
    FileGeometry geo;
    geo.base = base;
    LayoutInfo l = read_layout(src, geo, 64);
    CHECK(l.version == 3);
    CHECK(l.layout_class == LayoutClass::Contiguous);
    CHECK(l.contiguous_addr == 4096 + base);
    CHECK(l.contiguous_size == 800);
  }
  // A continuation pointing back at itself is a loop, not a hang.
  Bytes loop = f;
  const size_t cont_addr_pos = 64 + 16 + 16 + 8;
  loop.b[cont_addr_pos] = 200, loop.b[cont_addr_pos + 1] = 0;
  loop.pad_to(200);
  loop.u(0x10, 2), loop.u(16, 2), loop.u(0, 4), loop.u(200, 8), loop.u(24, 8);
  loop.pad_to(300);
  MemorySource src(loop.b, "loop.h5");
  CHECK_THROWS_AS(read_layout(src, FileGeometry{}, 64), h5d::Error);
}

TEST_CASE("h5format: layout message found in a v2 OCHK block", "[h5format]") {
  for (bool crt_order : {false, true}) {
    const size_t hdr = crt_order ? 6 : 4;  // message header size
    const std::vector<uint8_t> msg = layout_v4_fixed_array(2000);
    Bytes ochk;  // continuation block, to live at 300
    ochk.s("OCHK");
    ochk.u(0x08, 1), ochk.u(msg.size(), 2), ochk.u(1, 1);  // layout message, constant
    if (crt_order) ochk.u(2, 2);
    ochk.b.insert(ochk.b.end(), msg.begin(), msg.end());
    ochk.checksum(0);

    Bytes f;
    f.pad_to(48);
    const size_t oh = f.b.size();
    f.s("OHDR");
    f.u(2, 1);
    f.u(crt_order ? 0x04 | 0x20 : 0x20, 1);  // times stored, 1-byte chunk #0 size
    for (int i = 0; i < 4; ++i) f.u(1700000000, 4);
    f.u(2 * hdr + 16 + 3, 1);         // chunk #0: empty NIL message + continuation + 3-byte gap
    f.u(0, 1), f.u(0, 2), f.u(0, 1);  // NIL message, 0 bytes
    if (crt_order) f.u(0, 2);
    f.u(0x10, 1), f.u(16, 2), f.u(0, 1);  // continuation
    if (crt_order) f.u(1, 2);
    f.u(300, 8), f.u(ochk.b.size(), 8);
    f.u(0, 3);  // gap
    f.checksum(oh);
    f.pad_to(300);
    f.b.insert(f.b.end(), ochk.b.begin(), ochk.b.end());
    f.pad_to(4096);
    MemorySource src(f.b, "synthetic-v2.h5");
    LayoutInfo l = read_layout(src, FileGeometry{}, oh);
    CHECK(l.version == 4);
    CHECK(l.layout_class == LayoutClass::Chunked);
    CHECK(l.index_type == ChunkIndexType::FixedArray);
    CHECK(l.chunk_dims == Shape{6, 5});
    CHECK(l.chunk_elem_size == 4);
    CHECK(l.dont_filter_partial_edge_chunks);
    CHECK(l.index_addr == 2000);
    CHECK(l.index_params == std::vector<uint64_t>{10});
    // A flipped byte in the continuation block fails its checksum.
    std::vector<uint8_t> bad_bytes = f.b;
    bad_bytes[310] ^= 0x40;
    MemorySource bad(bad_bytes, "bad.h5");
    CHECK_THROWS_AS(read_layout(bad, FileGeometry{}, oh), h5d::Error);
  }
}

// Real files: move the layout message of a header with attributes into its continuation block
// (over an attribute message; the original becomes NIL, v2 checksums recomputed), so the layout
// is only reachable through the continuation.
namespace {

struct Msg {
  size_t type_pos, data_pos, size;
  unsigned type;
};

// Messages of one header chunk [pos, end), v1 (8-byte headers) or v2 (4 or 6).
std::vector<Msg> messages(const std::vector<uint8_t>& b, size_t pos, size_t end, bool v2, bool crt) {
  std::vector<Msg> out;
  const size_t hdr = v2 ? (crt ? 6 : 4) : 8;
  while (pos + hdr <= end) {
    Msg m;
    m.type_pos = pos;
    m.type = v2 ? b[pos] : le_uint(&b[pos], 2);
    m.size = le_uint(&b[pos + (v2 ? 1 : 2)], 2);
    m.data_pos = pos + hdr;
    out.push_back(m);
    pos = m.data_pos + m.size;
  }
  return out;
}

void move_layout_into_continuation(std::vector<uint8_t>& b, uint64_t oh, uint64_t base) {
  const bool v2 = std::memcmp(&b[oh], "OHDR", 4) == 0;
  size_t start, end;
  bool crt = false;
  if (v2) {
    const unsigned flags = b[oh + 5];
    crt = flags & 4;
    size_t p = oh + 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
    const size_t w = size_t(1) << (flags & 3);
    const uint64_t chunk0 = le_uint(&b[p], w);
    start = p + w;
    end = start + chunk0;
  } else {
    start = oh + 16;
    end = start + le_uint(&b[oh + 8], 4);
  }
  std::vector<Msg> first = messages(b, start, end, v2, crt);
  const Msg* layout = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> conts;  // continuation blocks, breadth first
  for (const Msg& m : first) {
    if (m.type == 8) layout = &m;
    if (m.type == 0x10) conts.emplace_back(base + le_uint(&b[m.data_pos], 8), le_uint(&b[m.data_pos + 8], 8));
  }
  REQUIRE(layout);
  std::vector<Msg> in_block;
  const Msg* target = nullptr;
  uint64_t caddr = 0, clen = 0;
  for (size_t i = 0; i < conts.size() && !target; ++i) {
    caddr = conts[i].first, clen = conts[i].second;
    in_block = messages(b, caddr + (v2 ? 4 : 0), caddr + clen - (v2 ? 4 : 0), v2, crt);
    for (const Msg& m : in_block) {
      if (m.type == 0x10) conts.emplace_back(base + le_uint(&b[m.data_pos], 8), le_uint(&b[m.data_pos + 8], 8));
      if (m.type == 0x0c && m.size >= layout->size && !target) target = &m;
    }
  }
  INFO("object header version " << (v2 ? 2 : 1) << ", " << conts.size() << " continuation blocks");
  REQUIRE(target);
  std::fill(b.data() + target->data_pos, b.data() + target->data_pos + target->size, 0);
  std::copy(b.data() + layout->data_pos, b.data() + layout->data_pos + layout->size, b.data() + target->data_pos);
  if (v2) {
    b[target->type_pos] = 8;
    b[layout->type_pos] = 0;
    auto put = [&](size_t at, uint32_t v) {
      for (size_t i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    };
    put(end, checksum_lookup3(&b[oh], end - oh));
    put(caddr + clen - 4, checksum_lookup3(&b[caddr], clen - 4));
  } else {
    b[target->type_pos] = 8, b[target->type_pos + 1] = 0;
    b[layout->type_pos] = 0, b[layout->type_pos + 1] = 0;
  }
}

}  // namespace

TEST_CASE("h5format: real headers with the layout message moved into a continuation block", "[h5format]") {
  QuietHdf5 quiet;
  for (bool latest : {false, true}) {
    FixtureSpec s = spec(latest, {50, 6}, {U, 6}, {3, 4}, true, WritePattern::EveryThird);
    s.n_attrs = 60;
    s.userblock = latest ? 512 : 0;
    const std::string path = h5format_tmp_path("moved_layout_" + std::to_string(latest) + ".h5");
    create_fixture(path, s);
    Oracle o = query_oracle(path);
    std::vector<uint8_t> bytes = read_file_bytes(path);
    MemorySource original(bytes, path);
    const Parsed before = parse(original, o);
    move_layout_into_continuation(bytes, o.ohdr_addr + o.geo.base, o.geo.base);
    MemorySource moved(bytes, path);
    const Parsed after = parse(moved, o);
    CHECK(after.layout.index_type == before.layout.index_type);
    CHECK(after.layout.index_addr == before.layout.index_addr);
    CHECK(after.layout.chunk_dims == before.layout.chunk_dims);
    CHECK(after.map.allocated() == o.nchunks);
    compare_with_oracle(o, after);
  }
}

// ---------------------------------------------------------------------------------------------
// Corruption: every damaged file gives h5d::Error, never a crash or a hang.

namespace {

std::string corrupt_fixture(const char* name, FixtureSpec s) {
  const std::string path = h5format_tmp_path(name);
  create_fixture(path, s);
  return path;
}

// Parses `bytes` with the oracle's geometry; returns true on success, false on h5d::Error.
bool parses(const std::vector<uint8_t>& bytes, const Oracle& o) {
  MemorySource src(bytes, "corrupt.h5");
  try {
    parse(src, o);
    return true;
  } catch (const h5d::Error& e) {
    CHECK(e.code() == EIO);
    CHECK(std::string(e.what()).rfind("corrupt.h5", 0) == 0);
    return false;
  }
}

}  // namespace

TEST_CASE("h5format: truncated files and garbage index bytes throw h5d::Error", "[h5format]") {
  QuietHdf5 quiet;
  using W = WritePattern;
  const FixtureSpec specs[] = {
      spec(false, {3000}, {}, {2}, true, W::EveryThird),          // v1 B-tree
      spec(true, {3001}, {}, {2}, true, W::EveryThird),           // paged fixed array
      spec(true, {2600}, {U}, {1}, true, W::EveryThird),          // extensible array
      spec(true, {60, 70}, {U, U}, {1, 1}, true, W::EveryThird),  // v2 B-tree
  };
  int i = 0;
  for (const FixtureSpec& s : specs) {
    const std::string path = corrupt_fixture(("corrupt_" + std::to_string(i++) + ".h5").c_str(), s);
    Oracle o = query_oracle(path, 0, 1);
    const std::vector<uint8_t> good = read_file_bytes(path);
    REQUIRE(parses(good, o));
    MemorySource gsrc(good, "good.h5");
    const LayoutInfo l = read_layout(gsrc, o.geo, o.ohdr_addr);
    REQUIRE(l.index_addr != kUndefAddr);

    // Truncation at many points.
    for (size_t cut : {size_t(0), size_t(100), size_t(l.index_addr), size_t(l.index_addr + 20), good.size() / 2}) {
      std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(std::min(cut, good.size())));
      INFO("fixture " << i << " (" << index_type_name(l.index_type) << ") cut at " << cut << " of " << good.size());
      CHECK_FALSE(parses(t, o));
    }
    // Garbage over the index root.
    std::vector<uint8_t> g = good;
    for (size_t k = 0; k < 64 && l.index_addr + k < g.size(); ++k) g[l.index_addr + k] = static_cast<uint8_t>(k * 37 + 11);
    CHECK_FALSE(parses(g, o));
    // Random byte flips anywhere in the file: success or h5d::Error, nothing else.
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> r = good;
      for (int flips = 0; flips < 4; ++flips) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        r[(rng >> 16) % r.size()] ^= static_cast<uint8_t>(1 + (rng >> 8) % 255);
      }
      parses(r, o);
    }
  }
}

TEST_CASE("h5format: v1 B-tree child pointing to itself or beyond EOF", "[h5format]") {
  QuietHdf5 quiet;
  const std::string path = corrupt_fixture("btree_loop.h5", spec(false, {3000}, {}, {2}, false));
  Oracle o = query_oracle(path, 0, 1);
  std::vector<uint8_t> good = read_file_bytes(path);
  MemorySource gsrc(good, "good.h5");
  const LayoutInfo l = read_layout(gsrc, o.geo, o.ohdr_addr);
  const size_t root = l.index_addr;
  REQUIRE(std::memcmp(&good[root], "TREE", 4) == 0);
  REQUIRE(good[root + 5] >= 1);  // root is an internal node
  const size_t key = 8 + 8 * 2;
  const size_t child0 = root + 8 + 16 + key;  // first child pointer
  auto with_child = [&](uint64_t v) {
    std::vector<uint8_t> b = good;
    for (size_t i = 0; i < 8; ++i) b[child0 + i] = static_cast<uint8_t>(v >> (8 * i));
    return b;
  };
  CHECK_FALSE(parses(with_child(root - o.geo.base), o));
  CHECK_FALSE(parses(with_child(good.size() + 100), o));
  CHECK_FALSE(parses(with_child(good.size() - 10), o));
  CHECK_FALSE(parses(with_child(0), o));
}

// A one-leaf v1 B-tree (40 int32 in chunks of 10: 4 entries) with its keys and child
// addresses patched: what libhdf5 would never find (keys out of order, outside the maximum
// extent) throws; records that only overlap are kept but marked damaged, chunk by chunk.
TEST_CASE("h5format: v1 B-tree keys and chunk extents checked against each other", "[h5format]") {
  QuietHdf5 quiet;
  auto leaf = [](const char* name, std::vector<hsize_t> maxdims) {
    const std::string path = corrupt_fixture(name, spec(false, {40}, std::move(maxdims), {10}, false));
    return path;
  };
  struct Leaf {
    Oracle o;
    std::vector<uint8_t> good;
    size_t root = 0;
    size_t key(unsigned i) const { return root + 24 + i * (24 + 8); }  // size, mask, 2 offsets
    size_t child(unsigned i) const { return key(i) + 24; }
    static void put(std::vector<uint8_t>& b, size_t at, uint64_t v) {
      for (size_t i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
    static uint64_t get(const std::vector<uint8_t>& b, size_t at) {
      uint64_t v = 0;
      for (size_t i = 0; i < 8; ++i) v |= uint64_t(b[at + i]) << (8 * i);
      return v;
    }
    Parsed parse_bytes(const std::vector<uint8_t>& b) const {
      MemorySource src(b, "corrupt.h5");
      return parse(src, o);
    }
  };
  auto open_leaf = [](const std::string& path) {
    Leaf l;
    l.o = query_oracle(path, 0, 1);
    l.good = read_file_bytes(path);
    MemorySource gsrc(l.good, "good.h5");
    l.root = read_layout(gsrc, l.o.geo, l.o.ohdr_addr).index_addr;
    REQUIRE(std::memcmp(&l.good[l.root], "TREE", 4) == 0);
    REQUIRE(l.good[l.root + 5] == 0);  // a leaf
    REQUIRE(l.good[l.root + 6] == 4);  // 4 entries
    for (unsigned i = 0; i < 4; ++i) REQUIRE(Leaf::get(l.good, l.key(i) + 8) == 10 * i);
    return l;
  };

  SECTION("undamaged: every chunk, none marked") {
    Leaf l = open_leaf(leaf("keys_good.h5", {}));
    Parsed p = l.parse_bytes(l.good);
    CHECK(p.map.allocated() == 4);
    CHECK(p.map.damaged() == 0);
    CHECK(p.map.beyond_extent == 0);
  }
  SECTION("a key moved so that keys are out of order") {
    Leaf l = open_leaf(leaf("keys_order.h5", {}));
    std::vector<uint8_t> b = l.good;
    Leaf::put(b, l.key(1) + 8, 30);  // 0, 30, 20, 30: chunk 1 lost, chunk 3 twice
    CHECK_THROWS_WITH(l.parse_bytes(b), Catch::Matchers::Contains("keys out of order"));
    // The same on an unlimited dataset, where (50) is a legal chunk place beyond the extent.
    Leaf u = open_leaf(leaf("keys_order_unlim.h5", {H5S_UNLIMITED}));
    b = u.good;
    Leaf::put(b, u.key(1) + 8, 50);
    CHECK_THROWS_WITH(u.parse_bytes(b), Catch::Matchers::Contains("keys out of order"));
  }
  SECTION("a chunk key whose element-size offset is not 0") {
    // libhdf5 compares that offset too: it finds no chunk there and serves fill.
    // Keys stay in order in each case (below the element size, or a key before the last):
    // only this check sees them.
    for (auto [entry, v] : {std::pair<unsigned, uint64_t>{3, 1}, {3, 2}, {2, 0x61000000}}) {
      INFO(entry << " " << v);
      Leaf l = open_leaf(leaf(("keys_elem" + std::to_string(v) + ".h5").c_str(), {}));
      std::vector<uint8_t> b = l.good;
      Leaf::put(b, l.key(entry) + 16, v);
      CHECK_THROWS_WITH(l.parse_bytes(b), Catch::Matchers::Contains("entry " + std::to_string(entry)) &&
                                              Catch::Matchers::Contains("element-size offset not 0"));
    }
  }
  SECTION("the last chunk's key moved outside the maximum extent (right key moved along)") {
    Leaf l = open_leaf(leaf("keys_max.h5", {}));
    std::vector<uint8_t> b = l.good;
    Leaf::put(b, l.key(3) + 8, 400);
    Leaf::put(b, l.key(4) + 8, 410);
    CHECK_THROWS_WITH(l.parse_bytes(b), Catch::Matchers::Contains("outside the maximum extent"));
    // Unlimited: beyond the current extent is legal (a live SWMR file): ignored and counted.
    Leaf u = open_leaf(leaf("keys_beyond.h5", {H5S_UNLIMITED}));
    b = u.good;
    Leaf::put(b, u.key(3) + 8, 50);
    Leaf::put(b, u.key(4) + 8, 60);
    Parsed p = u.parse_bytes(b);
    CHECK(p.map.allocated() == 3);
    CHECK(p.map.beyond_extent == 1);
  }
  SECTION("a chunk address moved into its neighbour, or into the B-tree node") {
    Leaf l = open_leaf(leaf("keys_overlap.h5", {}));
    std::vector<uint8_t> b = l.good;
    const uint64_t a1 = Leaf::get(b, l.child(1)), a2 = Leaf::get(b, l.child(2));
    REQUIRE(a2 == a1 + 40);  // back to back
    Leaf::put(b, l.child(2), a2 - 20);
    Parsed p = l.parse_bytes(b);
    CHECK(p.map.allocated() == 4);
    CHECK(p.map.damaged() == 2);
    CHECK_FALSE(p.map.damage(0));
    REQUIRE(p.map.damage(1));
    REQUIRE(p.map.damage(2));
    CHECK_THAT(*p.map.damage(2), Catch::Matchers::Contains("chunk (1) at") && Catch::Matchers::Contains("chunk (2) at") &&
                                     Catch::Matchers::Contains("overlap"));
    CHECK_FALSE(p.map.damage(3));
    b = l.good;
    Leaf::put(b, l.child(0), l.root + 8 - l.o.geo.base);
    p = l.parse_bytes(b);
    CHECK(p.map.damaged() == 1);
    REQUIRE(p.map.damage(0));
    CHECK_THAT(*p.map.damage(0), Catch::Matchers::Contains("v1 B-tree node"));
  }
}

TEST_CASE("h5format: read_stored_end gives the end libhdf5 stored, also after a cut", "[h5format]") {
  QuietHdf5 quiet;
  int checked = 0;
  for (bool latest : {false, true}) {
    for (hsize_t ub : {hsize_t(0), hsize_t(512), hsize_t(4096)}) {
      for (size_t offsets : {size_t(8), size_t(4)}) {
        FixtureSpec s = spec(latest, {40, 9}, {}, {3, 4}, true, WritePattern::All);
        s.userblock = ub;
        s.sizeof_offsets = offsets;
        const std::string path = h5format_tmp_path("stored_end_" + std::to_string(latest) + "_" + std::to_string(ub) +
                                                   "_" + std::to_string(offsets) + ".h5");
        try {
          create_fixture(path, s);
        } catch (const std::runtime_error& e) {
          WARN("libhdf5 refused this geometry (latest=" << latest << ", offsets=" << offsets << "): " << e.what());
          continue;
        }
        INFO(path);
        // The oracle: libhdf5's own idea of the file's end, for a file it closed.
        hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        REQUIRE(fid >= 0);
        hsize_t size = 0;
        REQUIRE(H5Fget_filesize(fid, &size) >= 0);
        H5Fclose(fid);
        std::vector<uint8_t> bytes = read_file_bytes(path);
        REQUIRE(bytes.size() == size);
        CHECK(read_stored_end(MemorySource(bytes, path)) == size);
        // A cut (after the superblock) keeps what the superblock says: that is how a truncated
        // file is recognised.
        bytes.resize(std::max<size_t>(bytes.size() / 2, ub + 128));
        CHECK(read_stored_end(MemorySource(bytes, path)) == size);
        ++checked;
      }
    }
  }
  CHECK(checked >= 6);
  // No superblock, or one cut short: unknown (0), never an exception.
  CHECK(read_stored_end(MemorySource(std::vector<uint8_t>(4096, 0), "zeros")) == 0);
  CHECK(read_stored_end(MemorySource(std::vector<uint8_t>{0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 0}, "short")) == 0);
}
