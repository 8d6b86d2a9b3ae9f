// Forward filters for the write path (core/writer.*): the bytes HDF5 (with the filter's usual
// plugin) stores for one chunk, and the pipelines the writer creates datasets with. Only what
// production writes: deflate, shuffle, Blosc, LZ4 (32004 framing), zstd (32015). Every output
// decodes with core/filters (decode_chunk) and with the HDF5 plugins.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/filters/filters.h"

namespace h5d::filters {

using EncodedBytes = std::vector<uint8_t>;

// zlib stream (libdeflate), what H5Pset_deflate stores. level 0-12 (libdeflate's range; 1-9 as zlib).
EncodedBytes encode_deflate(const uint8_t* p, size_t n, unsigned level);
// HDF5 byte shuffle (filter 2); the n % elem_size trailing bytes stay where they are.
EncodedBytes encode_shuffle(const uint8_t* p, size_t n, size_t elem_size);
// blosc_compress_ctx with room for Blosc's overhead (never fails for lack of room).
EncodedBytes encode_blosc(const uint8_t* p, size_t n, size_t typesize, unsigned clevel,
                          unsigned shuffle, unsigned compcode);
// The HDF5 LZ4 filter framing (big-endian total size, block size, then [size, block] pairs).
EncodedBytes encode_lz4(const uint8_t* p, size_t n, unsigned block_bytes = 0);
// ZSTD_compress, what the HDF5 zstd plugin (32015) stores.
EncodedBytes encode_zstd(const uint8_t* p, size_t n, int level);

// The pipeline for a compression name ("gzip"/"deflate", "blosc", "lz4", "zstd"; "" or "none":
// empty), with byte shuffle first when `shuffle` (Blosc shuffles inside itself). level < 0: the
// filter's default (gzip 4 as h5py, blosc 5, zstd 3). Throws Error(EINVAL) for unknown names.
std::vector<FilterInfo> write_pipeline(const std::string& compression, int level, bool shuffle,
                                       size_t elem_size, size_t chunk_bytes);

// Applies `pipeline` forward (filter 0 first) to one chunk. Supports the filters above.
EncodedBytes encode_pipeline(const std::vector<FilterInfo>& pipeline, size_t elem_size,
                             const uint8_t* p, size_t n);

}  // namespace h5d::filters
