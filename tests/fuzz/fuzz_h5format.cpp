// libFuzzer target for core/h5format: object header walk, data layout message and every chunk
// index parser. Input = a 16-byte control prefix + the bytes of an HDF5 file (kept in memory):
//   [0]     flags: bit0 4-byte offsets, bit1 4-byte lengths, bit7 synthetic layout (skip the
//           object header and build the LayoutInfo from the prefix, to reach the index parsers
//           even when the header is broken)
//   [1]     base address (user block) in units of 512 bytes
//   [2..5]  object header address (relative, LE u32), or in synthetic mode the index address
//   [6..9]  per dimension: current extent = chunk dim * (1 + byte % 8)
//   [10]    bit k set: dimension k unlimited (else maxdims = dims, or dims + chunk if bit k+4 of [11])
//   [11]    synthetic mode: low nibble index type (1..6), bits 4..7 extra max extent
//   [12..15] synthetic mode: rank (1..4) and chunk dims/elem size seeds
// Only h5d::Error may escape the parsers; anything else (crash, hang, other exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/fmt/chunk_index.h"

using namespace h5d;
using namespace h5d::fmt;

namespace {

uint32_t u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

LayoutInfo synthetic_layout(const uint8_t* c, const FileGeometry& geo) {
  LayoutInfo l;
  l.version = 4;
  l.layout_class = LayoutClass::Chunked;
  const unsigned type = 1 + (c[11] & 0x0f) % 6;
  l.index_type = static_cast<ChunkIndexType>(type);
  const unsigned rank = 1 + c[12] % 4;
  for (unsigned k = 0; k < rank; ++k) l.chunk_dims.push_back(1 + c[13 + k % 3] % 5);
  l.chunk_elem_size = 1 + c[15] % 8;
  l.index_addr = u32(c + 2) + geo.base;
  l.single_chunk_filtered = c[0] & 0x40;
  l.single_chunk_size = c[14];
  switch (l.index_type) {
    case ChunkIndexType::FixedArray: l.index_params = {10}; break;
    case ChunkIndexType::ExtensibleArray: l.index_params = {32, 4, 4, 16, 10}; break;
    case ChunkIndexType::BTreeV2: l.index_params = {2048, 100, 40}; break;
    default: break;
  }
  return l;
}

}  // namespace

// libFuzzer's entry point, declared as its FuzzerInterface.h does.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  const uint8_t* c = data;
  MemorySource src(std::vector<uint8_t>(data + 16, data + size), "fuzz.h5");
  FileGeometry geo;
  geo.sizeof_offsets = (c[0] & 1) ? 4 : 8;
  geo.sizeof_lengths = (c[0] & 2) ? 4 : 8;
  geo.base = uint64_t(c[1]) * 512;
  if (!(c[0] & 0x80)) {  // the same object header's attribute names (H5File::attribute_names)
    try {
      for (const std::string& n : read_attribute_names(src, geo, u32(c + 2)).names)
        if (n.find('\0') != std::string::npos) std::abort();
    } catch (const h5d::Error&) {
    }
  }
  try {
    LayoutInfo l = (c[0] & 0x80) ? synthetic_layout(c, geo) : read_layout(src, geo, u32(c + 2));
    index_type_name(l.index_type);
    if (l.layout_class != LayoutClass::Chunked) return 0;
    const size_t rank = l.chunk_dims.size();
    Shape dims(rank), maxdims(rank);
    uint64_t grid = 1;  // keep grids small (<= 2^16 chunks); the parsers bound everything else
    for (size_t k = 0; k < rank; ++k) {
      const uint64_t g = grid <= 8192 ? 1 + c[6 + k % 4] % 8 : 1;
      grid *= g;
      dims[k] = l.chunk_dims[k] * g;
      const bool unlimited = c[10] & (1u << (k % 4));
      const bool larger = c[11] & (0x10u << (k % 4));
      maxdims[k] = unlimited ? ~uint64_t(0) : dims[k] + (larger ? l.chunk_dims[k] : 0);
    }
    ChunkMap m = read_chunk_map(src, geo, l, dims, maxdims, l.chunk_elem_size ? l.chunk_elem_size : 1, c[0] & 0x40);
    uint64_t n = 0;
    m.for_each([&](uint64_t i, const ChunkLoc& loc) {
      if (loc.addr == kUndefAddr || loc.addr > src.size() || loc.size > src.size() - loc.addr) __builtin_trap();
      if (i >= m.grid_size()) __builtin_trap();
      ++n;
    });
    if (n != m.allocated()) __builtin_trap();
  } catch (const h5d::Error&) {
  }
  return 0;
}
