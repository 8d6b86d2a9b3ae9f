// What a user writes to create a dataset (vfs/dataset_spec.*, core's plan_dataset): checked
// before anything reaches libhdf5, with the errno a user sees. Sizes that would overflow are
// refused, never wrapped; what is accepted matches numpy's arithmetic (the oracle: numpy's own
// header bytes, written by np.lib.format in tests/fuzz/corpus/fuzz_dataset_spec, and products
// computed in 128 bits here).
#include <catch2/catch.hpp>

#include <cerrno>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/write/writer.h"
#include "vfs/dataset_spec.h"
#include "tests/support/errno_of.h"
#include "vfs/npy.h"

using namespace h5d;
using namespace h5d::vfs;
using h5d::test::errno_of;

namespace {

NewDataset spec(Shape shape, std::string typestr, Shape chunks = {}, std::string compression = "") {
  NewDataset d;
  d.shape = std::move(shape);
  d.typestr = std::move(typestr);
  d.chunks = std::move(chunks);
  d.compression = std::move(compression);
  return d;
}

std::string seed(const std::string& name) {
  std::ifstream f(std::string(H5D_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_dataset_spec/" + name, std::ios::binary);
  REQUIRE(f);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.substr(1);  // byte 0 picks the fuzz entry point
}

}  // namespace

TEST_CASE("dataset spec: plan sizes and chunks", "[writer][spec]") {
  auto p = plan_dataset(spec({100, 512, 128}, "<u2"));
  CHECK(p.itemsize == 2);
  CHECK(p.nbytes == 100ull * 512 * 128 * 2);
  CHECK(p.chunks.empty());
  CHECK(p.chunk_bytes == 0);

  p = plan_dataset(spec({10, 20}, "<f4", {50, 7}, "gzip"));
  CHECK(p.chunks == Shape{10, 7});  // clipped to the shape
  CHECK(p.chunk_bytes == 10 * 7 * 4);
  CHECK(!p.pipeline.empty());

  p = plan_dataset(spec({4000, 4000}, "<u2", {}, "lz4"));  // automatic chunks: ~1 MiB
  REQUIRE(p.chunks.size() == 2);
  CHECK(p.chunks[0] * p.chunks[1] * 2 <= (1u << 20));

  CHECK(plan_dataset(spec({}, ">f8", {}, "gzip")).chunks.empty());      // scalars: contiguous
  CHECK(plan_dataset(spec({0, 5}, "<i4", {}, "gzip")).chunks.empty());  // no elements: contiguous
}

TEST_CASE("dataset spec: what cannot be created is refused with its errno", "[writer][spec]") {
  // Products that wrap 2^64 (2^40 x 2^40 x 4) or pass 2^63 bytes.
  CHECK(errno_of([] { plan_dataset(spec({1ull << 40, 1ull << 40}, "<f4")); }) == EFBIG);
  CHECK(errno_of([] { plan_dataset(spec({1ull << 62}, "<u2")); }) == EFBIG);
  CHECK(errno_of([] { plan_dataset(spec({1ull << 61}, "<u2")); }) == 0);
  // Automatic chunks for a shape whose product wraps must not pass as small.
  CHECK(errno_of([] { plan_dataset(spec({1ull << 33, 1ull << 33}, "|u1", {}, "gzip")); }) == EFBIG);
  CHECK(errno_of([] { plan_dataset(spec({4, 4}, "<u1", {0, 2}, "gzip")); }) == EINVAL);
  CHECK(errno_of([] { plan_dataset(spec({4, 4}, "<u1", {2}, "gzip")); }) == EINVAL);
  CHECK(errno_of([] { plan_dataset(spec({1u << 20, 1u << 20}, "<f8", {1u << 20, 1u << 20})); }) == EINVAL);
  CHECK(errno_of([] { plan_dataset(spec({4}, "<u1", {}, "nosuch")); }) != 0);
  for (const char* t : {"<u3", "<f2", "|S0", "|S99999999999", "<x4", "u2", "<u", "<u2x", "|V8", "<M8"}) {
    INFO(t);
    CHECK(errno_of([&] { plan_dataset(spec({4}, t)); }) == EINVAL);
  }
  CHECK(errno_of([] { plan_dataset(spec(Shape(33, 1), "<u1")); }) == EINVAL);
}

TEST_CASE("dataset spec: JSON specs", "[writer][spec]") {
  const WriterOptions o;
  auto d = spec_from_json(R"({"shape": [10, 20], "dtype": "<f4", "chunks": [5, 20], "compression": "gzip", "level": 4})", o);
  CHECK(d.shape == Shape{10, 20});
  CHECK(d.chunks == Shape{5, 20});
  CHECK(d.level == 4);
  CHECK(spec_from_json(R"({"shape": [3], "dtype": "<u2", "level": 22})", o).level == 22);  // both ends
  CHECK(spec_from_json(R"({"shape": [3], "dtype": "<u2", "compression_opts": -1})", o).level == -1);
  CHECK(spec_from_json(R"({"shape": [3], "dtype": "=u2"})", o).typestr == "<u2");
  for (const char* bad : {R"({"shape": [-1], "dtype": "<u2"})", R"({"shape": [2.5], "dtype": "<u2"})",
                          R"({"shape": 3, "dtype": "<u2"})", R"({"shape": [3]})", R"({"dtype": "<u2"})",
                          R"({"shape": [3], "dtype": "<u2", "colour": 1})", "[1, 2]", "{", "",
                          // levels that are no int: converting them was undefined behaviour (fuzzer)
                          R"({"shape": [3], "dtype": "<u2", "level": 4.4e117})",
                          R"({"shape": [3], "dtype": "<u2", "level": 2.5})",
                          R"({"shape": [3], "dtype": "<u2", "level": 99999999999})",
                          R"({"shape": [3], "dtype": "<u2", "level": -2})",
                          R"({"shape": [3], "dtype": "<u2", "level": "9"})"}) {
    INFO(bad);
    CHECK(errno_of([&] { spec_from_json(bad, o); }) == EINVAL);
  }
}

TEST_CASE("dataset spec: numpy's headers parse to numpy's dtype and shape", "[writer][spec]") {
  const WriterOptions o;
  auto h = parse_npy_header(seed("npy_u2_3d"));
  CHECK(h.descr == "<u2");
  CHECK(h.shape == Shape{100, 512, 128});
  CHECK(plan_dataset(spec_from_npy(h, o)).nbytes == 100ull * 512 * 128 * 2);
  h = parse_npy_header(seed("npy_v2_c8"));  // version 2.0 header
  CHECK(h.descr == "<c8");
  CHECK(h.shape == Shape{3, 4});
  CHECK(parse_npy_header(seed("npy_f8_scalar")).shape.empty());
  CHECK(errno_of([&] { plan_dataset(spec_from_npy(parse_npy_header(seed("npy_huge")), o)); }) == EFBIG);
}

TEST_CASE("dataset spec: a dimension past 2^64 in a .npy header", "[writer][spec]") {
  auto header_with = [](const std::string& shape) {
    std::string dict = "{'descr': '<u2', 'fortran_order': False, 'shape': " + shape + ", }";
    dict.resize(118, ' ');
    dict += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + char(dict.size()) + '\0' + dict;
  };
  CHECK(parse_npy_header(header_with("(18446744073709551615,)")).shape == Shape{UINT64_MAX});
  CHECK(errno_of([&] { parse_npy_header(header_with("(18446744073709551616,)")); }) == EFBIG);
  CHECK(errno_of([&] { parse_npy_header(header_with("(99999999999999999999999, 2)")); }) == EFBIG);
  CHECK(errno_of([&] { plan_dataset(spec_from_npy(parse_npy_header(header_with("(18446744073709551615,)")), {})); }) == EFBIG);
}
