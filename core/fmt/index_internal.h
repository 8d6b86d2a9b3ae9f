// Internal to the chunk index parsers (chunk_index.cpp, index_*.cpp): what every parser needs
// to know about the dataset, and one place that turns a decoded index record into a ChunkMap
// entry with its checks (address inside the file, record count bounded, linear index -> scaled
// coordinates for the array-based indexes).
#pragma once
#include <string>

#include "core/fmt/chunk_index.h"
#include "core/fmt/checksum.h"
#include "core/fmt/cursor.h"

namespace h5d::fmt::detail {

struct IndexContext {
  const ByteSource& src;
  const FileGeometry& geo;
  const LayoutInfo& layout;
  const Shape& dims;
  const Shape& maxdims;
  size_t elem_size;
  bool filtered;
  ChunkMap& map;

  size_t rank() const { return layout.chunk_dims.size(); }
  uint64_t chunk_bytes = 0;  // unfiltered size of one chunk
  Shape max_grid;            // ceil(maxdims / chunk); 0 for unlimited dimensions
  uint64_t records = 0;      // records seen so far (bounded by record_limit)
  uint64_t record_limit = 0;

  Where where(const char* structure, uint64_t addr) const { return Where{&src, structure, addr}; }

  // read_block, charged against a budget of a few times the file size: index structures may
  // share bytes in a corrupt file, and this keeps the total work linear in the file size.
  std::vector<uint8_t> read(const Where& w, uint64_t n) {
    if (n > read_budget) fail_at(w, "index structures add up to more bytes than the file could hold");
    read_budget -= n;
    std::vector<uint8_t> b = read_block(w, n);
    if (n) structures.push_back({w.addr, n, w.structure});
    return b;
  }
  uint64_t read_budget = 0;
  // The index's own structures read so far (absolute address, bytes, what): a chunk must not
  // overlap them.
  struct Extent {
    uint64_t addr, size;
    const char* what;
  };
  std::vector<Extent> structures;

  // Records a chunk found in the index. `rel_addr` as stored (relative, or kUndefAddr).
  void add(const Where& w, const uint64_t* scaled, uint64_t rel_addr, uint64_t size, uint32_t mask);
  // "(3,0,1)": scaled chunk coordinates, as the readers name chunks in their messages.
  std::string coords(const uint64_t* scaled) const;
  // Scaled coordinates of linear index `idx` over the C-order grid `grid`; false if outside.
  static bool unlinear(uint64_t idx, const Shape& grid, uint64_t* scaled);
};

// Index structures about to be read, announced to the source at once (ByteSource::prefetch)
// when there are two or more and the read budget would pay for them: a cold index then costs a
// round trip per level, not per node or block. A hint: the reads that follow check everything.
struct IndexHint {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t total = 0;
  void add(uint64_t addr, uint64_t bytes) {
    if (addr == kUndefAddr || bytes == 0) return;
    ranges.emplace_back(addr, bytes);
    total = bytes > ~uint64_t(0) - total ? ~uint64_t(0) : total + bytes;
  }
  void give(const IndexContext& ctx) const {
    if (ranges.size() > 1 && total <= ctx.read_budget) ctx.src.prefetch(ranges);
  }
};

// Decodes the chunk records of the fixed and extensible arrays: an address, then for filtered
// chunks a chunk size of (element size - address size - 4) bytes and a 4-byte filter mask.
struct ArrayElementCodec {
  ArrayElementCodec(const IndexContext& ctx, const Where& w, unsigned client_id, size_t elem_bytes);
  void decode(const uint8_t* p, uint64_t* rel_addr, uint64_t* size, uint32_t* mask) const {
    const uint64_t a = le_uint(p, offsets);
    *rel_addr = a == undef ? kUndefAddr : a;
    if (filtered) {
      *size = le_uint(p + offsets, size_len);
      *mask = static_cast<uint32_t>(le_uint(p + offsets + size_len, 4));
    } else {
      *size = chunk_bytes;
      *mask = 0;
    }
  }
  size_t elem_bytes;
  size_t offsets;
  size_t size_len = 0;
  bool filtered;
  uint64_t undef;
  uint64_t chunk_bytes;
};

// Bit `i` of an HDF5 bitmap (most significant bit of each byte first, as H5VM_bit_get).
inline bool bitmap_get(const uint8_t* bits, uint64_t i) { return bits[i / 8] & (0x80u >> (i % 8)); }

void read_btree_v1(IndexContext& ctx);
void read_fixed_array(IndexContext& ctx);
void read_extensible_array(IndexContext& ctx);
void read_btree_v2(IndexContext& ctx);
// After an index is read: chunks overlapping each other or the index's nodes marked damaged.
void check_extents(IndexContext& ctx);

}  // namespace h5d::fmt::detail
