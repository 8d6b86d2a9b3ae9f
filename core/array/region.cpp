#include "core/array/region.h"

#include <algorithm>
#include <cstring>

namespace h5d {

uint64_t product(const Shape& s) {
  uint64_t p = 1;
  for (auto v : s) p *= v;
  return p;
}

uint64_t Region::elements() const { return product(count); }
bool Region::empty() const {
  for (auto c : count)
    if (c == 0) return true;
  return false;
}

std::vector<int64_t> c_strides(const Shape& shape, size_t itemsize) {
  std::vector<int64_t> st(shape.size());
  int64_t s = static_cast<int64_t>(itemsize);
  for (size_t k = shape.size(); k-- > 0;) {
    st[k] = s;
    s *= static_cast<int64_t>(shape[k]);
  }
  return st;
}

void for_each_region_in_range(const Shape& shape, uint64_t e0, uint64_t e1,
                              const std::function<void(const Region&)>& fn) {
  const size_t rank = shape.size();
  if (e0 >= e1) return;
  if (rank == 0) {
    fn(Region{{}, {}});
    return;
  }
  // sizes[k] = number of elements spanned by one step in dimension k.
  std::vector<uint64_t> sizes(rank);
  uint64_t s = 1;
  for (size_t k = rank; k-- > 0;) {
    sizes[k] = s;
    s *= shape[k];
  }
  auto coords_of = [&](uint64_t e) {
    Shape c(rank);
    for (size_t k = 0; k < rank; ++k) {
      c[k] = e / sizes[k];
      e %= sizes[k];
    }
    return c;
  };
  uint64_t e = e0;
  while (e < e1) {
    // Grow the block from the innermost dimension outwards: at dimension k we can take whole
    // "rows" of dimension k while e is aligned to sizes[k] (all inner coords zero).
    Shape start = coords_of(e);
    size_t k = rank - 1;
    // Find the outermost dimension d such that e is aligned to sizes[d] and at least one
    // full step of d fits in the remaining range.
    size_t d = rank - 1;
    for (size_t j = rank - 1; j-- > 0;) {
      if (e % sizes[j] == 0 && e + sizes[j] <= e1) d = j;
      else break;
    }
    (void)k;
    Region r;
    r.start = start;
    r.count.assign(rank, 1);
    for (size_t j = d + 1; j < rank; ++j) r.count[j] = shape[j];
    // How many steps of dimension d: up to the end of that dimension and of the range.
    uint64_t room = shape[d] - start[d];
    uint64_t steps = std::min<uint64_t>(room, (e1 - e) / sizes[d]);
    if (steps == 0) steps = 1;  // only happens for d == rank-1 with one element left
    r.count[d] = steps;
    fn(r);
    e += steps * sizes[d];
  }
}

void copy_region(const Shape& count, size_t itemsize, const uint8_t* src,
                 const std::vector<int64_t>& src_strides, uint8_t* dst,
                 const std::vector<int64_t>& dst_strides) {
  const size_t rank = count.size();
  if (rank == 0) {
    std::memcpy(dst, src, itemsize);
    return;
  }
  for (auto c : count)
    if (c == 0) return;
  // Merge trailing dimensions that are contiguous in both buffers into one memcpy run.
  size_t inner = rank;  // dims [inner, rank) form one contiguous run
  uint64_t run = itemsize;
  while (inner > 0) {
    size_t k = inner - 1;
    if (src_strides[k] == static_cast<int64_t>(run) && dst_strides[k] == static_cast<int64_t>(run)) {
      run *= count[k];
      inner = k;
    } else {
      break;
    }
  }
  if (inner == 0) {
    std::memcpy(dst, src, run);
    return;
  }
  // Iterate over dims [0, inner) with an odometer.
  Shape idx(inner, 0);
  const size_t last = inner - 1;
  const uint64_t n_last = count[last];
  for (;;) {
    const uint8_t* s = src;
    uint8_t* d = dst;
    for (size_t k = 0; k < last; ++k) {
      s += static_cast<int64_t>(idx[k]) * src_strides[k];
      d += static_cast<int64_t>(idx[k]) * dst_strides[k];
    }
    for (uint64_t i = 0; i < n_last; ++i) {
      std::memcpy(d, s, run);
      s += src_strides[last];
      d += dst_strides[last];
    }
    size_t k = last;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < count[k]) break;
      idx[k] = 0;
    }
  }
}

void fill_region(const Shape& count, const std::vector<uint8_t>& value, uint8_t* dst,
                 const std::vector<int64_t>& dst_strides) {
  const size_t itemsize = value.size();
  const size_t rank = count.size();
  if (rank == 0) {
    std::memcpy(dst, value.data(), itemsize);
    return;
  }
  for (auto c : count)
    if (c == 0) return;
  bool all_zero = std::all_of(value.begin(), value.end(), [](uint8_t b) { return b == 0; });
  // Build one contiguous run of the innermost contiguous dimensions, then copy it around.
  size_t inner = rank;
  uint64_t run_elems = 1;
  while (inner > 0 && dst_strides[inner - 1] == static_cast<int64_t>(run_elems * itemsize)) {
    run_elems *= count[inner - 1];
    --inner;
  }
  std::vector<uint8_t> pattern;
  if (!all_zero) {
    pattern.resize(run_elems * itemsize);
    for (uint64_t i = 0; i < run_elems; ++i) std::memcpy(&pattern[i * itemsize], value.data(), itemsize);
  }
  const uint64_t run_bytes = run_elems * itemsize;
  if (inner == 0) {
    if (all_zero) std::memset(dst, 0, run_bytes);
    else std::memcpy(dst, pattern.data(), run_bytes);
    return;
  }
  Shape idx(inner, 0);
  for (;;) {
    uint8_t* d = dst;
    for (size_t k = 0; k < inner; ++k) d += static_cast<int64_t>(idx[k]) * dst_strides[k];
    if (all_zero) std::memset(d, 0, run_bytes);
    else std::memcpy(d, pattern.data(), run_bytes);
    size_t k = inner;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < count[k]) break;
      idx[k] = 0;
    }
  }
}

bool intersect(const Region& a, const Region& b, Region& out) {
  const size_t rank = a.start.size();
  out.start.resize(rank);
  out.count.resize(rank);
  for (size_t k = 0; k < rank; ++k) {
    uint64_t lo = std::max(a.start[k], b.start[k]);
    uint64_t hi = std::min(a.start[k] + a.count[k], b.start[k] + b.count[k]);
    if (hi <= lo) return false;
    out.start[k] = lo;
    out.count[k] = hi - lo;
  }
  return true;
}

}  // namespace h5d
