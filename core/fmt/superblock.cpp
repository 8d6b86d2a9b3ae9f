// read_stored_end: the superblock's end of address space (File Format Specification v3, II.A:
// versions 0 and 1 store base, free-space, end-of-file and driver addresses after 24 or 28
// bytes; versions 2 and 3 store base, extension, end-of-file and root addresses after 12).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/fmt/chunk_index.h"

namespace h5d::fmt {
namespace {
const uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
}  // namespace

int hdf5_signature(int fd, uint64_t file_size, uint64_t* at) {
  uint8_t buf[sizeof kSignature];
  for (uint64_t off = 0; off + sizeof buf <= file_size; off = off ? off * 2 : 512) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(off));
    if (n < 0) return -errno;
    if (n != static_cast<ssize_t>(sizeof buf)) return 0;
    if (std::memcmp(buf, kSignature, sizeof buf) == 0) {
      if (at) *at = off;
      return 1;
    }
  }
  return 0;
}

std::string truncated_message(uint64_t size, uint64_t stored_end) {
  return "truncated file: " + std::to_string(size) + " bytes, its superblock says " + std::to_string(stored_end);
}

uint64_t read_stored_end(const ByteSource& src) {
  const uint64_t size = src.size();
  constexpr uint64_t kRead = 28 + 4 * 8;  // the longest prefix up to the end-of-file address
  for (uint64_t at = 0; at + kRead <= size; at = at ? at * 2 : 512) {
    uint8_t b[kRead];
    try {
      src.read_at(at, b, sizeof b);
    } catch (const std::exception&) {
      return 0;
    }
    if (std::memcmp(b, kSignature, 8) != 0) continue;
    const unsigned version = b[8];
    size_t osz = 0, first = 0;  // size of addresses, offset of the base address
    if (version <= 1) {
      osz = b[13];
      first = version == 0 ? 24 : 28;
    } else if (version <= 3) {
      osz = b[9];
      first = 12;
    } else {
      return 0;
    }
    if (osz != 2 && osz != 4 && osz != 8) return 0;
    auto addr = [&](size_t k) {  // the k-th address from the base address on, little-endian
      uint64_t v = 0;
      for (size_t i = 0; i < osz; ++i) v |= uint64_t(b[first + k * osz + i]) << (8 * i);
      return v;
    };
    const uint64_t base = addr(0), end = addr(2);
    const uint64_t undef = osz == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * osz)) - 1;
    constexpr uint64_t kMax = uint64_t(1) << 62;  // no file is larger; guards the sum
    if (end == undef || base > kMax || end > kMax || end < base) return 0;
    // The end is stored as an absolute address; a superblock found elsewhere than its base
    // address (a user block added later) moves it, as libhdf5 moves it.
    return end - base + at;
  }
  return 0;
}

}  // namespace h5d::fmt
