// Rectangular regions of an N-d array and strided destinations: the common currency of reads.
// A read of bytes [off, off+len) of an array's C-order bytes is cut into at most 2*rank+1
// rectangular regions (plus partial elements at the ends); each region is planned by the array.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/vocab/shape.h"

namespace h5d {

struct Region {
  Shape start;
  Shape count;
  uint64_t elements() const;
  bool empty() const;
};

// Where a region's elements go: element (i0, i1, ...) of the region (relative to its start)
// lands at base + sum(ik * strides[k]) bytes. strides may be any layout (C order of the whole
// array for byte-range reads, or of a temporary buffer).
struct DestView {
  uint8_t* base = nullptr;
  std::vector<int64_t> strides;  // bytes, one per dimension
};

// C-order strides in bytes for an array of `shape` with `itemsize`-byte elements.
std::vector<int64_t> c_strides(const Shape& shape, size_t itemsize);
uint64_t product(const Shape& s);

// Cuts the element range [e0, e1) of an array of `shape` (C order) into rectangular regions and
// calls fn(region) for each, in order.
void for_each_region_in_range(const Shape& shape, uint64_t e0, uint64_t e1,
                              const std::function<void(const Region&)>& fn);

// Copies a region between two strided buffers (both views describe the same region extent).
// Innermost contiguous runs are copied with memcpy.
void copy_region(const Shape& count, size_t itemsize, const uint8_t* src,
                 const std::vector<int64_t>& src_strides, uint8_t* dst,
                 const std::vector<int64_t>& dst_strides);

// Fills a region of a strided destination with a repeated element value (fill values).
void fill_region(const Shape& count, const std::vector<uint8_t>& value, uint8_t* dst,
                 const std::vector<int64_t>& dst_strides);

// Intersects [a_start, a_start+a_count) with [b_start, b_start+b_count) per dimension; false if
// empty.
bool intersect(const Region& a, const Region& b, Region& out);

}  // namespace h5d
