#include "core/array/stack_array.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace h5d {
namespace {

template <class T>
std::vector<T> cat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::vector<uint8_t> default_fill(const DType& dtype) {
  std::vector<uint8_t> v(dtype.itemsize, 0);
  if (dtype.is_struct() || dtype.typestr.size() < 2 || dtype.typestr[1] != 'f') return v;
  switch (dtype.itemsize) {
    case 2: {
      uint16_t x = 0x7e00;  // numpy's float16 NaN
      std::memcpy(v.data(), &x, 2);
      break;
    }
    case 4: {
      float x = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(v.data(), &x, 4);
      break;
    }
    case 8: {
      double x = std::numeric_limits<double>::quiet_NaN();
      std::memcpy(v.data(), &x, 8);
      break;
    }
    default: {
      long double x = std::numeric_limits<long double>::quiet_NaN();
      std::memcpy(v.data(), &x, std::min(sizeof x, v.size()));
      break;
    }
  }
  if (dtype.typestr[0] == '>') std::reverse(v.begin(), v.end());  // stored big-endian
  return v;
}

std::vector<uint8_t> all_ones_fill(const DType& dtype) {
  return std::vector<uint8_t>(dtype.itemsize, 0xff);
}

StackArray::StackArray(std::vector<Module> modules, Shape entry, DType dtype,
                       std::vector<uint8_t> fill, Layout layout, std::string what)
    : modules_(std::move(modules)), entry_(std::move(entry)), dtype_(std::move(dtype)),
      fill_(std::move(fill)), layout_(layout), what_(std::move(what)) {
  if (fill_.size() != dtype_.itemsize) fail(EINVAL, what_ + ": fill value of the wrong size");
  if (!layout_.frames_first) layout_.cells = 1;
  if (layout_.cells == 0) fail(EINVAL, what_ + ": zero cells");
  if ((layout_.squeeze || layout_.cells > 1) && (entry_.empty() || (layout_.squeeze && entry_[0] != 1) ||
                                                 (layout_.cells > 1 && entry_[0] != layout_.cells)))
    fail(EINVAL, what_ + ": entry axis 0 does not match the layout");
  if (layout_.squeeze && layout_.cells > 1) fail(EINVAL, what_ + ": squeeze with cells");
  for (const Module& m : modules_) {
    if (!m.array) continue;
    const Shape& s = m.array->shape();
    if (s.empty() || Shape(s.begin() + 1, s.end()) != entry_)
      fail(EINVAL, what_ + ": " + m.array->describe() + " has a different entry shape");
    if (m.array->dtype().itemsize != dtype_.itemsize)
      fail(EINVAL, what_ + ": " + m.array->describe() + " has a different element size");
    uint64_t prev_end = 0;
    for (const Piece& p : m.pieces) {
      if (p.src_row + p.rows > s[0] || p.out_row + p.rows > layout_.entries || p.out_row < prev_end)
        fail(EINVAL, what_ + ": piece out of range or out of order for " + m.array->describe());
      prev_end = p.out_row + p.rows;
    }
  }
  Shape inner = (layout_.squeeze || layout_.cells > 1) ? Shape(entry_.begin() + 1, entry_.end())
                                                       : entry_;
  if (layout_.frames_first)
    shape_ = cat(Shape{layout_.entries * layout_.cells, uint64_t(modules_.size())}, inner);
  else
    shape_ = cat(Shape{uint64_t(modules_.size()), layout_.entries}, inner);
}

template <class Src, class Fill>
void StackArray::walk(const Region& r, const DestView& dst, Src&& src, Fill&& fill) const {
  const bool ff = layout_.frames_first;
  const size_t ma = ff ? 1 : 0, fa = ff ? 0 : 1;
  const uint64_t C = layout_.cells;
  const Shape e_start(r.start.begin() + 2, r.start.end()), e_count(r.count.begin() + 2, r.count.end());
  const std::vector<int64_t> e_strides(dst.strides.begin() + 2, dst.strides.end());
  const uint64_t m0 = r.start[ma], m1 = m0 + r.count[ma];
  const uint64_t f0 = r.start[fa], f1 = f0 + r.count[fa];
  const int64_t fs = dst.strides[fa];
  for (uint64_t m = m0; m < m1; ++m) {
    uint8_t* base = dst.base + int64_t(m - m0) * dst.strides[ma];
    const Module& mod = modules_[m];
    auto fill_frames = [&](uint64_t a, uint64_t b) {
      if (b <= a) return;
      DestView d;
      d.base = base + int64_t(a - f0) * fs;
      d.strides = cat(std::vector<int64_t>{fs}, e_strides);
      fill(d, cat(Shape{b - a}, e_count));
    };
    if (!mod.array) {
      fill_frames(f0, f1);
      continue;
    }
    const auto& P = mod.pieces;
    // First piece ending (in frames) after f0.
    size_t i = static_cast<size_t>(
        std::upper_bound(P.begin(), P.end(), f0,
                         [C](uint64_t f, const Piece& p) { return f < (p.out_row + p.rows) * C; }) -
        P.begin());
    uint64_t f = f0;
    for (; i < P.size() && f < f1; ++i) {
      const Piece& p = P[i];
      const uint64_t pa = p.out_row * C, pb = (p.out_row + p.rows) * C;
      if (pa >= f1) break;
      if (pa > f) {
        fill_frames(f, pa);
        f = pa;
      }
      uint64_t a = f;
      const uint64_t b = std::min(pb, f1);
      if (C == 1) {
        Region s;
        s.start = {p.src_row + (a - p.out_row)};
        s.count = {b - a};
        DestView d;
        d.base = base + int64_t(a - f0) * fs;
        d.strides = {fs};
        if (layout_.squeeze) {
          s.start.push_back(0);
          s.count.push_back(1);
          d.strides.push_back(0);
        }
        s.start = cat(s.start, e_start);
        s.count = cat(s.count, e_count);
        d.strides = cat(d.strides, e_strides);
        src(mod, s, d);
      } else {
        while (a < b) {
          const uint64_t e = a / C, c0 = a % C;
          const uint64_t row = p.src_row + (e - p.out_row);
          Region s;
          DestView d;
          d.base = base + int64_t(a - f0) * fs;
          if (c0 != 0 || b - a < C) {  // part of one entry's cells
            const uint64_t c1 = std::min<uint64_t>(C, c0 + (b - a));
            s.start = cat(Shape{row, c0}, e_start);
            s.count = cat(Shape{1, c1 - c0}, e_count);
            d.strides = cat(std::vector<int64_t>{0, fs}, e_strides);
            a += c1 - c0;
          } else {  // whole entries
            const uint64_t ne = (b - a) / C;
            s.start = cat(Shape{row, 0}, e_start);
            s.count = cat(Shape{ne, C}, e_count);
            d.strides = cat(std::vector<int64_t>{int64_t(C) * fs, fs}, e_strides);
            a += ne * C;
          }
          src(mod, s, d);
        }
      }
      f = b;
    }
    fill_frames(f, f1);
  }
}

void StackArray::plan(const Region& r, const DestView& dst, ReadPlan& plan) const {
  if (r.empty()) return;
  walk(
      r, dst,
      [&](const Module& m, const Region& s, const DestView& d) { m.array->plan(s, d, plan); },
      [&](const DestView& d, const Shape& count) {
        std::vector<uint8_t> value = fill_;
        plan.add([count, value, d] { fill_region(count, value, d.base, d.strides); });
      });
}

void StackArray::plan_prefetch(const Region& r, ReadPlan& plan) const {
  if (r.empty()) return;
  walk(
      r, DestView{nullptr, std::vector<int64_t>(r.start.size(), 0)},
      [&](const Module& m, const Region& s, const DestView&) { m.array->plan_prefetch(s, plan); },
      [](const DestView&, const Shape&) {});
}

bool StackArray::locate(uint64_t off, Located& at) const {
  if (off >= nbytes() || modules_.empty() || layout_.entries == 0) return false;
  const uint64_t C = layout_.cells, M = modules_.size(), N = layout_.entries;
  const uint64_t cell = nbytes() / (M * N * C);  // bytes of one cell of one entry
  if (cell == 0) return false;
  uint64_t m, frame;
  if (layout_.frames_first) {
    frame = off / (M * cell);
    m = off / cell % M;
    at.run_lo = off / cell * cell;
    at.run_hi = at.run_lo + cell;
  } else {
    m = off / (N * cell);
    frame = off % (N * cell) / cell;
    at.run_lo = m * N * cell;
  }
  const Module& mod = modules_[m];
  if (!mod.array) return false;
  const uint64_t entry = frame / C;
  auto it = std::upper_bound(mod.pieces.begin(), mod.pieces.end(), entry,
                             [](uint64_t e, const Piece& p) { return e < p.out_row + p.rows; });
  if (it == mod.pieces.end() || entry < it->out_row) return false;
  at.array = mod.array.get();
  if (layout_.frames_first) {
    at.part_lo = ((it->src_row + (entry - it->out_row)) * C + frame % C) * cell;
  } else {  // the piece's entries follow each other in the module's block
    at.run_lo += it->out_row * C * cell;
    at.run_hi = at.run_lo + it->rows * C * cell;
    at.part_lo = it->src_row * C * cell;
  }
  return true;
}

ByteSpan StackArray::decode_span(uint64_t off) const {
  Located at;
  if (!locate(off, at)) return {};
  return shifted_span(*at.array, at.part_lo, at.run_lo, at.run_hi, off);
}

bool StackArray::file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const {
  if (off > nbytes() || len > nbytes() - off) return false;
  const size_t mark = out.size();
  const uint64_t end = off + len;
  for (uint64_t pos = off; pos < end;) {
    Located at;
    if (!locate(pos, at)) {  // fill
      out.resize(mark);
      return false;
    }
    const uint64_t n = std::min(end, at.run_hi) - pos;
    // The modules' arrays append with append_run, which merges a run with the one before it
    // when they are adjacent in one file (one module's frames, one after another).
    if (!at.array->file_runs(at.part_lo + (pos - at.run_lo), n, out)) {
      out.resize(mark);
      return false;
    }
    pos += n;
  }
  return true;
}

bool StackArray::decodes() const {
  for (const Module& m : modules_)
    if (m.array && m.array->decodes()) return true;
  return false;
}

bool StackArray::decoded(const Region& r) const {
  bool all = !r.empty();
  walk(
      r, DestView{nullptr, std::vector<int64_t>(r.start.size(), 0)},
      [&](const Module& m, const Region& s, const DestView&) { all = all && m.array->decoded(s); },
      [](const DestView&, const Shape&) {});
  return all;
}

std::vector<uint8_t> StackArray::coverage() const {
  const uint64_t N = layout_.entries;
  std::vector<uint8_t> out(modules_.size() * N, 0);
  for (size_t m = 0; m < modules_.size(); ++m) {
    if (!modules_[m].array) continue;
    for (const Piece& p : modules_[m].pieces)
      std::fill_n(out.data() + m * N + p.out_row, p.rows, uint8_t(1));
  }
  return out;
}

}  // namespace h5d
