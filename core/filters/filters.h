// Undoing HDF5 filter pipelines on stored chunk bytes, without the HDF5 library.
// Supported directly: deflate (libdeflate), shuffle, fletcher32 (verified), LZF (liblzf),
// Blosc (c-blosc, context API, one internal thread), LZ4 (filter 32004 framing), bitshuffle
// (32008, none/LZ4/zstd), zstd (32015). Anything else is read through the library (fallback).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/vocab/filter_info.h"

namespace h5d::filters {

// Filter ids, the one place they are spelled: 1-6 are HDF5's own (H5Zpublic.h), the others as
// registered with the HDF Group (its list of registered filter plugins). Everything in h5direct
// that names a filter says filters::kLzf etc.
enum FilterId : int {
  kDeflate = 1,
  kShuffle = 2,
  kFletcher32 = 3,
  kSzip = 4,
  kNbit = 5,
  kScaleOffset = 6,
  kLzf = 32000,
  kBlosc = 32001,
  kLz4 = 32004,
  kBitshuffle = 32008,
  kZstd = 32015,
};

// Canonical short name for a filter id ("deflate", "shuffle", "blosc", ...; "filter-<id>").
std::string filter_name(int id);

// True when every filter in the pipeline can be undone here; otherwise false and *why names the
// first unsupported filter ("szip (id 4) has no direct decoder").
bool pipeline_supported(const std::vector<FilterInfo>& pipeline, std::string* why);

// Undoes `pipeline` in reverse order for one stored chunk, honouring `filter_mask` (bit i set:
// filter i was skipped for this chunk). `elem_size` is the dataset's element size, `out_size`
// the decoded chunk size (product of chunk dims times element size). `in` may be reused as a
// scratch buffer. On success `out` holds exactly out_size bytes. Corrupt or inconsistent input
// (bad stream, wrong decoded size, checksum mismatch) throws h5d::Error(EIO) saying what failed;
// never crashes, never reads or writes out of bounds.
void decode_chunk(const std::vector<FilterInfo>& pipeline, uint32_t filter_mask, size_t elem_size,
                  std::vector<uint8_t>& in, size_t out_size, std::vector<uint8_t>& out);
// The same from bytes the caller keeps (a merged request's buffer): `in` is only read.
void decode_chunk(const std::vector<FilterInfo>& pipeline, uint32_t filter_mask, size_t elem_size,
                  const uint8_t* in, size_t in_len, size_t out_size, std::vector<uint8_t>& out);

}  // namespace h5d::filters
