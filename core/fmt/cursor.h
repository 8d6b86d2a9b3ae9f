// Reading the on-disk structures (object headers, layout message, chunk indexes): one
// bounds-checked little-endian cursor over a buffer read with one read_at call, checked
// addresses, and small helpers that build "<file>: <structure> at <addr>: <what>" errors.
// Everything in HDF5 files is little-endian (File Format Specification v3, section I.A).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fmt/byte_source.h"
#include "core/fmt/chunk_index.h"

namespace h5d::fmt {

// Decodes an n-byte (n <= 8) little-endian unsigned integer.
inline uint64_t le_uint(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// What a structure is and where it starts, for error messages.
struct Where {
  const ByteSource* src = nullptr;
  const char* structure = "";
  uint64_t addr = 0;  // absolute
};

[[noreturn]] void fail_at(const Where& w, const std::string& what);

// Reads `n` bytes of a structure at absolute `addr`, checking first that they lie in the file.
std::vector<uint8_t> read_block(const Where& w, uint64_t n);

// Relative (as stored) -> absolute address; kUndefAddr stays undefined. Fails when the result
// lies outside the file.
uint64_t to_absolute(const Where& w, const FileGeometry& geo, uint64_t rel);

// A bounds-checked reading position inside one buffer.
class Cursor {
 public:
  Cursor(const Where& w, const FileGeometry& geo, const uint8_t* data, size_t n, size_t pos = 0)
      : w_(w), geo_(geo), data_(data), n_(n), pos_(pos) {}
  Cursor(const Where& w, const FileGeometry& geo, const std::vector<uint8_t>& buf)
      : Cursor(w, geo, buf.data(), buf.size()) {}

  uint64_t u(size_t nbytes) {
    need(nbytes);
    uint64_t v = le_uint(data_ + pos_, nbytes);
    pos_ += nbytes;
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(u(1)); }
  uint16_t u16() { return static_cast<uint16_t>(u(2)); }
  uint32_t u32() { return static_cast<uint32_t>(u(4)); }
  uint64_t u64() { return u(8); }
  // A stored (relative) address: kUndefAddr when all ones, else as stored.
  uint64_t rel_addr() {
    uint64_t v = u(geo_.sizeof_offsets);
    return is_undef(v) ? kUndefAddr : v;
  }
  // A stored address converted to absolute and checked against the file size.
  uint64_t addr() { return to_absolute(w_, geo_, rel_addr()); }
  uint64_t length() { return u(geo_.sizeof_lengths); }
  void skip(size_t nbytes) {
    need(nbytes);
    pos_ += nbytes;
  }
  void expect_signature(const char sig[4]) {
    need(4);
    if (std::memcmp(data_ + pos_, sig, 4) != 0) fail_at(w_, std::string("bad signature, expected ") + sig);
    pos_ += 4;
  }
  const uint8_t* here() const { return data_ + pos_; }
  size_t pos() const { return pos_; }
  void seek(size_t pos) {
    if (pos > n_) fail_at(w_, "offset " + std::to_string(pos) + " beyond the structure");
    pos_ = pos;
  }
  size_t remaining() const { return n_ - pos_; }
  void need(size_t nbytes) const {
    if (nbytes > n_ - pos_)
      fail_at(w_, "truncated: needs " + std::to_string(nbytes) + " bytes at offset " +
                      std::to_string(pos_) + " of " + std::to_string(n_));
  }
  bool is_undef(uint64_t v) const {
    return geo_.sizeof_offsets >= 8 ? v == kUndefAddr : v == (uint64_t(1) << (8 * geo_.sizeof_offsets)) - 1;
  }
  const Where& where() const { return w_; }

 private:
  Where w_;
  const FileGeometry& geo_;
  const uint8_t* data_;
  size_t n_;
  size_t pos_;
};

// Throws when geo has sizes HDF5 cannot produce (offsets/lengths must be 2, 4 or 8 bytes).
void check_geometry(const ByteSource& src, const FileGeometry& geo);

// Checked arithmetic for sizes computed from file contents.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out);

}  // namespace h5d::fmt
