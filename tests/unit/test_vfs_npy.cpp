// .npy headers against the bytes numpy 1.24 writes (vectors taken from np.save).
#include <catch2/catch.hpp>

#include <string>

#include "vfs/npy.h"

using h5d::DType;
using h5d::Field;
using h5d::Shape;
using h5d::vfs::npy_dict;
using h5d::vfs::npy_header;
using h5d::vfs::HeadSplit;
using h5d::vfs::split_at_header;

namespace {

DType scalar(const std::string& t, size_t n) {
  DType d;
  d.typestr = t;
  d.itemsize = n;
  return d;
}

Field field(const std::string& name, size_t off, DType t, std::vector<uint64_t> sub = {}) {
  Field f;
  f.name = name;
  f.offset = off;
  f.type = {std::move(t)};
  f.subshape = std::move(sub);
  return f;
}

// numpy's v1.0 header of 128 bytes around `dict` (numpy adds 21 - digits(shape[0]) spaces).
std::string numpy_v1_128(const std::string& dict) {
  std::string h = std::string("\x93NUMPY\x01\x00", 8) + std::string("v\x00", 2) + dict;
  h.append(127 - h.size(), ' ');
  return h + "\n";
}

uint64_t header_len_field(const std::string& h) {
  if (h[6] == 1) return static_cast<uint8_t>(h[8]) | static_cast<uint8_t>(h[9]) << 8;
  uint64_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(h[8 + static_cast<size_t>(i)]);
  return v;
}

}  // namespace

TEST_CASE("npy dict is formatted exactly as numpy writes it", "[vfs]") {
  CHECK(npy_dict(scalar("<u2", 2), {3, 4}) ==
        "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }");
  CHECK(npy_dict(scalar(">f8", 8), {}) == "{'descr': '>f8', 'fortran_order': False, 'shape': (), }");
  CHECK(npy_dict(scalar("|b1", 1), {5}) == "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }");
}

TEST_CASE("npy headers with align=64 match numpy byte for byte", "[vfs]") {
  CHECK(npy_header(scalar("<u2", 2), {3, 4}, 64) ==
        numpy_v1_128("{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }"));
  CHECK(npy_header(scalar(">f8", 8), {}, 64) ==
        numpy_v1_128("{'descr': '>f8', 'fortran_order': False, 'shape': (), }"));
  CHECK(npy_header(scalar("|u1", 1), {0, 5}, 64) ==
        numpy_v1_128("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 5), }"));

  DType rec;
  rec.itemsize = 28;
  rec.fields = {field("a", 0, scalar("<i4", 4)), field("b", 4, scalar("<f8", 8), {3})};
  CHECK(npy_header(rec, {7}, 64) ==
        numpy_v1_128("{'descr': [('a', '<i4'), ('b', '<f8', (3,))], 'fortran_order': False, "
                     "'shape': (7,), }"));

  DType padded;
  padded.itemsize = 8;
  padded.fields = {field("x", 2, scalar("<i2", 2))};
  CHECK(npy_header(padded, {2}, 64) ==
        numpy_v1_128("{'descr': [('', '|V2'), ('x', '<i2'), ('', '|V4')], 'fortran_order': "
                     "False, 'shape': (2,), }"));
}

TEST_CASE("npy headers are numpy's, padded so that the data start on a page", "[vfs]") {
  // The default: numpy's header with more padding spaces before the newline.
  const std::string numpy = numpy_v1_128("{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }");
  const std::string h = npy_header(scalar("<u2", 2), {3, 4});
  REQUIRE(h.size() == 4096);
  CHECK(header_len_field(h) == 4096 - 10);
  CHECK(h.compare(10, 117, numpy, 10, 117) == 0);  // magic..dict identical (length field aside)
  CHECK(h.find_first_not_of(' ', 127) == 4095);
  CHECK(h.back() == '\n');
  // A dict that does not fit numpy's 10,000-byte limit when padded to a page multiple keeps
  // numpy's 64-byte alignment.
  DType d;
  for (size_t i = 0; i < 500; ++i)
    d.fields.push_back(field("f" + std::to_string(1000 + i), 4 * i, scalar("<i4", 4)));
  d.itemsize = 4 * 500;
  const std::string big = npy_header(d, {1});
  INFO("header of " << big.size() << " bytes");
  CHECK(big.size() > 8192 - 10);
  CHECK(big.size() % 64 == 0);
  CHECK(big.size() % 4096 != 0);
  CHECK(header_len_field(big) <= 10000 + 64);
}

TEST_CASE("npy data offset is a multiple of 64 and the header ends with a newline", "[vfs]") {
  for (uint64_t n : {0ull, 1ull, 9ull, 10ull, 123456789ull, 18446744073709551615ull}) {
    for (size_t rank = 0; rank < 5; ++rank) {
      Shape s(rank, n);
      const std::string h = npy_header(scalar("<c16", 16), s);
      INFO("n=" << n << " rank=" << rank);
      CHECK(h.size() % 64 == 0);
      CHECK(h.back() == '\n');
      CHECK(h.compare(0, 6, "\x93NUMPY") == 0);
      CHECK(header_len_field(h) == h.size() - 10);
    }
  }
}

TEST_CASE("npy version 2.0 only when the header does not fit 65535 bytes", "[vfs]") {
  auto many_fields = [](size_t n) {
    DType d;
    for (size_t i = 0; i < n; ++i) {
      d.fields.push_back(field("field_number_" + std::to_string(100000 + i), 4 * i, scalar("<i4", 4)));
    }
    d.itemsize = 4 * n;
    return d;
  };
  // Each field is "('field_number_1xxxxx', '<i4'), " = 32 bytes.
  const std::string small = npy_header(many_fields(1900), {1});
  CHECK(small[6] == 1);
  CHECK(small.size() <= 65535 + 10);
  const std::string big = npy_header(many_fields(2100), {1});
  CHECK(big[6] == 2);
  CHECK(big[7] == 0);
  CHECK(big.size() % 64 == 0);
  CHECK(header_len_field(big) == big.size() - 12);

  // The exact threshold: grow until the version flips; v1 must never exceed a 16-bit length.
  int last = 1;
  for (size_t n = 2040; n < 2060; ++n) {
    const std::string h = npy_header(many_fields(n), {1});
    if (h[6] == 1) {
      CHECK(last == 1);
      CHECK(header_len_field(h) == h.size() - 10);
      CHECK(h.size() - 10 <= 65535);
    } else {
      last = 2;
      // numpy switches only when the v1 length field would overflow.
      CHECK(h.size() - 12 + 2 > 65535 - 64);
    }
  }
}

TEST_CASE("npy header uses version 3.0 for non-ASCII field names", "[vfs]") {
  DType d;
  d.itemsize = 4;
  d.fields = {field("\xc3\xa9t\xc3\xa9", 0, scalar("<i4", 4))};
  const std::string h = npy_header(d, {1});
  CHECK(h[6] == 3);
  CHECK(h.size() % 64 == 0);
}

TEST_CASE("a read or write of a .npy splits at the header's end", "[vfs]") {
  // Against a byte-by-byte walk of the same range: each byte is the header's or a data byte.
  for (uint64_t header : {0u, 1u, 64u, 4096u})
    for (uint64_t off : {0u, 1u, 63u, 64u, 65u, 4095u, 4096u, 5000u})
      for (uint64_t n : {0u, 1u, 2u, 100u, 4096u, 9000u}) {
        uint64_t head = 0, data_len = 0, data_off = ~0ull;
        for (uint64_t b = off; b < off + n; ++b) {
          if (b < header) {
            ++head;
          } else {
            if (data_off == ~0ull) data_off = b - header;
            ++data_len;
          }
        }
        const HeadSplit s = split_at_header(header, off, n);
        INFO("header " << header << " off " << off << " n " << n);
        CHECK(s.head == head);
        CHECK(s.data_len == data_len);
        if (data_len) CHECK(s.data_off == data_off);
      }
}
