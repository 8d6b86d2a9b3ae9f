// Not a test: regenerates the libFuzzer seeds of tests/fuzz/fuzz_h5format.cpp (small real HDF5
// files, one per chunk index type, each behind the fuzzer's 16-byte control prefix). Hidden:
//   h5direct_unit_tests "[.h5format_seeds]"   (writes to $H5D_SEED_DIR, default the source tree)
#include <catch2/catch.hpp>

#include <cstdlib>

#include "tests/support/h5format_fixtures.h"

using namespace h5d::testing;

TEST_CASE("h5format: write fuzz seeds", "[.h5format_seeds]") {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const char* env = std::getenv("H5D_SEED_DIR");
  const std::string dir = env ? env : "tests/fuzz/corpus/fuzz_h5format";
  const hsize_t U = H5S_UNLIMITED;
  struct Seed {
    const char* name;
    FixtureSpec spec;
  };
  auto mk = [](bool latest, std::vector<hsize_t> dims, std::vector<hsize_t> maxdims, std::vector<hsize_t> chunk,
               bool deflate, WritePattern p) {
    FixtureSpec s;
    s.latest = latest;
    s.dims = dims;
    s.maxdims = maxdims;
    s.chunk = chunk;
    s.deflate = deflate;
    s.pattern = p;
    return s;
  };
  std::vector<Seed> seeds = {
      {"btree1", mk(false, {40, 6}, {}, {4, 3}, true, WritePattern::EveryThird)},
      {"btree1_deep", mk(false, {200}, {}, {1}, false, WritePattern::All)},
      {"single", mk(true, {6, 5}, {}, {6, 5}, true, WritePattern::All)},
      {"fixed", mk(true, {20, 6}, {}, {4, 3}, false, WritePattern::EveryThird)},
      {"fixed_paged", mk(true, {1100}, {}, {1}, false, WritePattern::FirstHalf)},
      {"earray", mk(true, {30, 6}, {U, 6}, {2, 3}, true, WritePattern::All)},
      {"earray_swizzled", mk(true, {6, 30}, {6, U}, {3, 2}, false, WritePattern::EveryThird)},
      {"earray_sblocks", mk(true, {300}, {U}, {1}, false, WritePattern::All)},
      {"btree2", mk(true, {12, 10}, {U, U}, {1, 1}, true, WritePattern::All)},
  };
  FixtureSpec implicit = mk(true, {10, 9}, {}, {5, 3}, false, WritePattern::None);
  implicit.alloc_early = true;
  seeds.push_back({"implicit", implicit});
  FixtureSpec ub = mk(true, {20, 6}, {U, U}, {4, 3}, true, WritePattern::All);
  ub.userblock = 512;
  ub.n_attrs = 12;
  seeds.push_back({"btree2_userblock_attrs", ub});
  FixtureSpec o4 = mk(false, {20, 6}, {}, {4, 3}, false, WritePattern::All);
  o4.sizeof_offsets = 4;
  seeds.push_back({"btree1_offsets4", o4});
  for (const Seed& s : seeds) {
    const std::string tmp = h5format_tmp_path(std::string("seed_") + s.name + ".h5");
    create_fixture(tmp, s.spec);
    Oracle o = query_oracle(tmp, 0, 1);
    std::vector<uint8_t> bytes(16, 0);
    bytes[0] = (o.geo.sizeof_offsets == 4 ? 1 : 0) | (o.geo.sizeof_lengths == 4 ? 2 : 0) | (o.filtered ? 0x40 : 0);
    bytes[1] = static_cast<uint8_t>(o.geo.base / 512);
    for (size_t i = 0; i < 4; ++i) bytes[2 + i] = static_cast<uint8_t>(o.ohdr_addr >> (8 * i));
    for (size_t k = 0; k < o.dims.size() && k < 4; ++k)
      bytes[6 + k] = static_cast<uint8_t>((o.dims[k] + o.chunk[k] - 1) / o.chunk[k] - 1);
    for (size_t k = 0; k < o.dims.size() && k < 4; ++k)
      if (o.maxdims[k] == ~uint64_t(0)) bytes[10] |= 1u << k;
    const std::vector<uint8_t> file = read_file_bytes(tmp);
    bytes.insert(bytes.end(), file.begin(), file.end());
    write_file_bytes(dir + "/" + s.name, bytes);
    CHECK(bytes.size() < 64 * 1024);
  }
}
