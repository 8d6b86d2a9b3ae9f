// Forward filters for tests and fixtures: each produces the bytes HDF5 (with the filter's usual
// plugin) stores for one chunk, so fixtures can be written with H5Dwrite_chunk even for filters
// Debian's HDF5 cannot apply (bitshuffle, zstd). Written independently of core/filters: the
// bitshuffle transpose here is the plain bit-by-bit definition, an oracle for the fast decoder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/filters/filters.h"

namespace h5d {
namespace test {

using Bytes = std::vector<uint8_t>;

// ---- FilterInfo builders with the cd_values the filters' set_local callbacks store ----------
FilterInfo deflate_filter(unsigned level = 6);
FilterInfo shuffle_filter(size_t elem_size);
FilterInfo fletcher32_filter();
FilterInfo lzf_filter(size_t chunk_bytes);
// compcode: 0 blosclz, 1 lz4, 2 lz4hc, 3 snappy, 4 zlib, 5 zstd; shuffle 0 none, 1 byte, 2 bit.
FilterInfo blosc_filter(size_t typesize, size_t chunk_bytes, unsigned clevel = 5,
                        unsigned shuffle = 1, unsigned compcode = 0);
FilterInfo lz4_filter(unsigned block_bytes = 0);  // 0: the plugin's default (1 GiB)
// compression: 0 none, 2 LZ4, 3 zstd; block_elems 0 = bitshuffle's default.
FilterInfo bitshuffle_filter(size_t elem_size, unsigned block_elems = 0, unsigned compression = 2,
                             unsigned level = 0);
FilterInfo zstd_filter(unsigned level = 3);

// ---- single filters ---------------------------------------------------------------------------
Bytes encode_deflate(const uint8_t* p, size_t n, unsigned level = 6);  // zlib compress2
Bytes encode_shuffle(const uint8_t* p, size_t n, size_t elem_size);
uint32_t fletcher32_simple(const uint8_t* p, size_t n);
Bytes encode_fletcher32(const uint8_t* p, size_t n);  // data + LE u32 checksum
// lzf_compress into a buffer of n bytes, as h5py's filter does; empty when it does not fit
// (the filter then fails and HDF5 skips it: filter mask bit).
Bytes encode_lzf(const uint8_t* p, size_t n);
// blosc_compress_ctx into a buffer of n bytes, as the HDF5 Blosc filter does; empty when it
// does not fit (Blosc is an optional filter: HDF5 then skips it).
Bytes encode_blosc(const uint8_t* p, size_t n, size_t typesize, unsigned clevel = 5,
                   unsigned shuffle = 1, unsigned compcode = 0);
Bytes encode_lz4(const uint8_t* p, size_t n, unsigned block_bytes = 0);
// The plain bit transpose of one block (n_elem % 8 == 0): output bit (j*8+k)*n_elem + i is
// bit k of byte j of element i.
void bitshuffle_block_simple(const uint8_t* in, uint8_t* out, size_t n_elem, size_t elem_size);
// bshuf_bitshuffle (compression 0) or the bshuf_h5filter framing with LZ4 (2) / zstd (3).
Bytes encode_bitshuffle(const uint8_t* p, size_t n, size_t elem_size, unsigned block_elems = 0,
                        unsigned compression = 2, int zstd_level = 0);
// ZSTD_compress (what the HDF5 zstd plugin writes); `checksum` adds a content checksum.
Bytes encode_zstd(const uint8_t* p, size_t n, int level = 3, bool checksum = false);

// Applies `pipeline` forward (filter 0 first). Optional filters that cannot apply (LZF or Blosc
// data that does not shrink) are skipped and their bit set in *filter_mask, as HDF5 does; bits
// already set in *filter_mask on entry force those filters to be skipped.
Bytes encode_chunk(const std::vector<FilterInfo>& pipeline, size_t elem_size, const Bytes& bytes,
                   uint32_t* filter_mask = nullptr);

}  // namespace test
}  // namespace h5d
