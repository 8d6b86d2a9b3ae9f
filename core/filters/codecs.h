// Internal building blocks of the filter decoders (see filters.h for the public entry point).
// Exposed for the unit tests, the fuzz targets and bench/bench_decode.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace h5d::filters {
struct FilterInfo;

namespace codec {

// bitshuffle cd_values[4]
enum : unsigned { kBshufNone = 0, kBshufLz4 = 2, kBshufZstd = 3 };

constexpr size_t kUnknown = SIZE_MAX;

// Where a decoder writes: either a caller's std::vector (resized, never reallocated when its
// size is already right) or a thread-local scratch area that is never zero-filled.
class Sink {
 public:
  explicit Sink(std::vector<uint8_t>* v) : vec_(v) {}
  Sink(std::unique_ptr<uint8_t[]>* buf, size_t* cap) : buf_(buf), cap_(cap) {}
  // Returns a buffer of at least n writable bytes (valid until the next get()).
  uint8_t* get(size_t n);
  // Tells the sink that exactly n bytes were produced (n <= the last get()).
  void produced(size_t n);
  const uint8_t* data() const;

 private:
  std::vector<uint8_t>* vec_ = nullptr;
  std::unique_ptr<uint8_t[]>* buf_ = nullptr;
  size_t* cap_ = nullptr;
};

// Every decoder reads src[0, n) and writes its output into `dst`, returning the number of bytes
// produced. `expected` is the exact size the output must have (kUnknown when an earlier
// size-changing filter makes it unknowable), `cap` an upper bound used when it is unknown.
// Errors throw h5d::Error(EIO, "<filter>: <what>").
size_t inflate_zlib(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap);
size_t lzf_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap);
size_t blosc_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap);
size_t lz4_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap);
size_t zstd_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap);
size_t bitshuffle_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap,
                         const std::vector<unsigned>& cd, size_t elem_size);

// HDF5 shuffle, reversed: dst[i*size + j] = src[j*N + i], N = nbytes / size; the trailing
// nbytes % size bytes are copied as they are. src and dst must not overlap.
void unshuffle(const uint8_t* src, uint8_t* dst, size_t nbytes, size_t elem_size);

// bitshuffle's bshuf_untrans_bit_elem for one block of `nelem` elements (nelem % 8 == 0):
// output bit k of byte j of element i comes from input bit (j*8 + k)*nelem + i (bits numbered
// least significant first within each byte).
void bitunshuffle_block(const uint8_t* src, uint8_t* dst, size_t nelem, size_t elem_size);
// bshuf_bitunshuffle: blocks of block_size elements, a last block of the remaining multiple of 8,
// the final nelem % 8 elements raw. block_size must be a nonzero multiple of 8.
void bitunshuffle(const uint8_t* src, uint8_t* dst, size_t nelem, size_t elem_size,
                  size_t block_size);
// bshuf_default_block_size: 8192 bytes' worth of elements, multiple of 8, at least 128.
size_t bitshuffle_default_block(size_t elem_size);

// HDF5's H5_checksum_fletcher32 (16-bit big-endian words, odd last byte as the high byte).
uint32_t fletcher32(const uint8_t* p, size_t n);
// Verifies the 4-byte checksum at the end of p[0, n) (stored little-endian; the byte-swapped
// value written by HDF5 <= 1.6.2 is accepted too) and returns n - 4.
size_t fletcher32_check(const uint8_t* p, size_t n);

}  // namespace codec
}  // namespace h5d::filters
