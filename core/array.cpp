#include "core/array.h"

#include <algorithm>

#include "core/error.h"

namespace h5d {

MemoryArray::MemoryArray(Shape shape, DType dtype, std::vector<uint8_t> bytes, std::string what)
    : shape_(std::move(shape)), dtype_(std::move(dtype)), bytes_(std::move(bytes)), what_(std::move(what)) {
  if (bytes_.size() != product(shape_) * dtype_.itemsize)
    fail(EINVAL, what_ + ": memory array size does not match its shape");
}

void MemoryArray::plan(const Region& r, const DestView& dst, ReadPlan& plan) const {
  if (r.empty()) return;
  auto src_strides = c_strides(shape_, dtype_.itemsize);
  const uint8_t* src = bytes_.data();
  for (size_t k = 0; k < r.start.size(); ++k) src += r.start[k] * src_strides[k];
  Region region = r;
  DestView d = dst;
  const size_t itemsize = dtype_.itemsize;
  plan.add([region, d, src, src_strides, itemsize] {
    copy_region(region.count, itemsize, src, src_strides, d.base, d.strides);
  });
}

ConcatArray::ConcatArray(std::vector<Part> parts, Shape trailing, DType dtype, std::string what)
    : parts_(std::move(parts)), dtype_(std::move(dtype)), what_(std::move(what)) {
  uint64_t rows = 0;
  for (const auto& p : parts_) {
    if (p.end < p.begin) fail(EINVAL, what_ + ": part with end before begin");
    const Shape& s = p.array->shape();
    if (s.empty() || p.end > s[0]) fail(EIO, what_ + ": part rows beyond " + p.array->describe());
    if (Shape(s.begin() + 1, s.end()) != trailing)
      fail(EIO, what_ + ": " + p.array->describe() + " has a different row shape");
    if (p.array->dtype().itemsize != dtype_.itemsize)
      fail(EIO, what_ + ": " + p.array->describe() + " has a different element size");
    offsets_.push_back(rows);
    rows += p.end - p.begin;
  }
  shape_.push_back(rows);
  shape_.insert(shape_.end(), trailing.begin(), trailing.end());
}

template <class Fn>
void ConcatArray::for_each_part(const Region& r, Fn&& fn) const {
  for_each_row_block(
      offsets_, [&](size_t i) { return parts_[i].end - parts_[i].begin; }, [&](size_t i) { return parts_[i].begin; },
      r, [&](size_t i, const Region& sub, uint64_t out_row) { fn(parts_[i], sub, out_row); });
}

void ConcatArray::plan(const Region& r, const DestView& dst, ReadPlan& plan) const {
  if (r.empty()) return;
  for_each_part(r, [&](const Part& p, const Region& sub, uint64_t out_row) {
    DestView d = dst;
    d.base += static_cast<int64_t>(out_row) * dst.strides[0];
    p.array->plan(sub, d, plan);
  });
}

uint64_t ConcatArray::fetch_rows() const {
  // A common unit only when every part's bands line up with the concatenation's.
  uint64_t f = 0;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const uint64_t g = parts_[i].array->fetch_rows();
    if (g == 0 || (f != 0 && g != f) || parts_[i].begin % g != 0 || offsets_[i] % g != 0) return 0;
    f = g;
  }
  return f;
}

bool ConcatArray::decoded(const Region& r) const {
  bool all = true;
  for_each_part(r, [&](const Part& p, const Region& sub, uint64_t) { all = all && p.array->decoded(sub); });
  return all;
}

void ConcatArray::plan_prefetch(const Region& r, ReadPlan& plan) const {
  if (r.empty()) return;
  for_each_part(r, [&](const Part& p, const Region& sub, uint64_t) { p.array->plan_prefetch(sub, plan); });
}

}  // namespace h5d
