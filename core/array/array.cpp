#include "core/array/array.h"

#include <algorithm>
#include <set>

#include "core/engine/threadpool.h"
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
  // C-order strides of a shape: never negative.
  for (size_t k = 0; k < r.start.size(); ++k) src += r.start[k] * static_cast<uint64_t>(src_strides[k]);
  Region region = r;
  DestView d = dst;
  const size_t itemsize = dtype_.itemsize;
  plan.add([region, d, src, src_strides, itemsize] {
    copy_region(region.count, itemsize, src, src_strides, d.base, d.strides);
  });
}

ByteSpan shifted_span(const Array& part, uint64_t part_lo, uint64_t run_lo, uint64_t run_hi, uint64_t off) {
  const ByteSpan p = part.decode_span(part_lo + (off - run_lo));
  if (p.empty()) return {};
  const uint64_t lo = p.lo >= part_lo ? run_lo + (p.lo - part_lo) : run_lo;
  const uint64_t hi = run_lo + (p.hi - std::min(p.hi, part_lo));
  return {std::max(lo, run_lo), std::min(hi, run_hi)};
}

ConcatArray::ConcatArray(std::vector<Part> parts, Shape trailing, DType dtype, std::string what, OpenMany open_many,
                         ThreadPool* pool)
    : open_many_(std::move(open_many)), pool_(pool), trailing_(std::move(trailing)), dtype_(std::move(dtype)),
      what_(std::move(what)) {
  uint64_t rows = 0;
  for (Part& p : parts) {
    if (p.rows == 0) continue;
    offsets_.push_back(rows);
    rows += p.rows;
    parts_.push_back(std::move(p));
  }
  arrays_.resize(parts_.size());
  shape_.push_back(rows);
  shape_.insert(shape_.end(), trailing_.begin(), trailing_.end());
}

ArrayPtr ConcatArray::part_array(size_t i) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (arrays_[i]) return arrays_[i];
  }
  const Part& p = parts_[i];
  ArrayPtr a;
  try {
    a = p.open();
  } catch (...) {
    rethrow_with_context(what_ + ": " + p.what);
  }
  if (!a) fail_data(what_ + ": " + p.what + ": no array");
  const Shape& s = a->shape();
  if (s.empty() || !same_dtype(a->dtype(), dtype_) || !std::equal(s.begin() + 1, s.end(), trailing_.begin(), trailing_.end()))
    fail_data(what_ + ": " + p.what + " has a different dtype or entry shape than the first part");
  if (p.begin + p.rows > s[0])
    fail_data(what_ + ": " + p.what + ": rows [" + std::to_string(p.begin) + ", " +
              std::to_string(p.begin + p.rows) + ") named but the dataset has " + std::to_string(s[0]));
  std::lock_guard<std::mutex> lk(mu_);
  if (!arrays_[i]) arrays_[i] = a;
  return arrays_[i];
}

std::map<size_t, std::exception_ptr> ConcatArray::open_parts(const Region& r) const {
  if (!pool_ && !open_many_) return {};
  std::vector<size_t> todo;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for_each_row_block(
        offsets_, [&](size_t i) { return parts_[i].rows; }, [&](size_t i) { return parts_[i].begin; }, r,
        [&](size_t i, const Region&, uint64_t) {
          if (!arrays_[i]) todo.push_back(i);
        });
  }
  return open_parts(std::move(todo));
}

std::map<size_t, std::exception_ptr> ConcatArray::open_parts(std::vector<size_t> todo) const {
  std::map<size_t, std::exception_ptr> failed;
  if (todo.size() < 2) return failed;
  if (open_many_) {
    std::vector<const Part*> many;
    for (size_t i : todo) many.push_back(&parts_[i]);
    try {
      open_many_(many);
    } catch (const std::exception&) {  // a hint: each open below still does its own work
    }
  }
  std::mutex failed_mu;  // a leaf: only `failed`
  std::vector<std::function<void()>> opens;
  for (size_t i : todo)
    opens.push_back([this, i, &failed, &failed_mu] {
      ThreadPool::Waiting waiting;  // on metadata (a helper) and the source, not a CPU
      try {
        part_array(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(failed_mu);
        failed[i] = std::current_exception();
      }
    });
  if (pool_) {
    pool_->run_all(opens);
  } else {
    for (auto& open : opens) open();
  }
  return failed;
}

template <class Fn>
void ConcatArray::for_each_part(const Region& r, Fn&& fn) const {
  const std::map<size_t, std::exception_ptr> failed = open_parts(r);
  for_each_row_block(
      offsets_, [&](size_t i) { return parts_[i].rows; }, [&](size_t i) { return parts_[i].begin; }, r,
      [&](size_t i, const Region& sub, uint64_t out_row) {
        if (auto it = failed.find(i); it != failed.end()) std::rethrow_exception(it->second);
        fn(part_array(i), sub, out_row);
      });
}

void ConcatArray::plan(const Region& r, const DestView& dst, ReadPlan& plan) const {
  if (r.empty()) return;
  for_each_part(r, [&](const ArrayPtr& a, const Region& sub, uint64_t out_row) {
    DestView d = dst;
    d.base += static_cast<int64_t>(out_row) * dst.strides[0];
    a->plan(sub, d, plan);
  });
}

void ConcatArray::plan_prefetch(const Region& r, ReadPlan& plan) const {
  if (r.empty()) return;
  for_each_part(r, [&](const ArrayPtr& a, const Region& sub, uint64_t) { a->plan_prefetch(sub, plan); });
}

ByteSpan ConcatArray::decode_span(uint64_t off) const {
  const uint64_t row_bytes = product(trailing_) * dtype_.itemsize;
  if (row_bytes == 0 || off >= nbytes()) return {};
  const uint64_t row = off / row_bytes;
  const size_t i = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), row) - offsets_.begin()) - 1;
  return shifted_span(*part_array(i), parts_[i].begin * row_bytes, offsets_[i] * row_bytes,
                      (offsets_[i] + parts_[i].rows) * row_bytes, off);
}

bool ConcatArray::decodes() const { return !parts_.empty() && part_array(0)->decodes(); }

bool ConcatArray::decoded(const Region& r) const {
  bool all = !r.empty();
  for_each_part(r, [&](const ArrayPtr& a, const Region& sub, uint64_t) { all = all && a->decoded(sub); });
  return all;
}

bool ConcatArray::file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const {
  const uint64_t row_bytes = product(trailing_) * dtype_.itemsize;
  if (row_bytes == 0 || off >= nbytes() || len > nbytes() - off) return false;
  const size_t mark = out.size();
  Region rows;  // the rows these bytes touch: their parts are opened at once
  rows.start.assign(shape_.size(), 0);
  rows.count = shape_;
  rows.start[0] = off / row_bytes;
  rows.count[0] = (off + len + row_bytes - 1) / row_bytes - rows.start[0];
  const std::map<size_t, std::exception_ptr> failed = open_parts(rows);
  for (uint64_t pos = off, end = off + len; pos < end;) {
    const uint64_t row = pos / row_bytes;
    const size_t i = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), row) - offsets_.begin()) - 1;
    const uint64_t part_end = (offsets_[i] + parts_[i].rows) * row_bytes;  // in this array's bytes
    const uint64_t n = std::min(end, part_end) - pos;
    const uint64_t part_off = parts_[i].begin * row_bytes + (pos - offsets_[i] * row_bytes);
    if (auto it = failed.find(i); it != failed.end()) std::rethrow_exception(it->second);
    if (!part_array(i)->file_runs(part_off, n, out)) {
      out.resize(mark);
      return false;
    }
    pos += n;
  }
  return true;
}

void ConcatArray::source_files(std::vector<SourceFile>& out, size_t open_at_most) const {
  // The parts of the first `open_at_most` files (in row order) are opened, at once.
  std::vector<size_t> todo;
  std::set<std::string> files;
  size_t opened = parts_.size();
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!files.count(parts_[i].file) && files.size() >= open_at_most) {
      opened = i;
      break;
    }
    files.insert(parts_[i].file);
    std::lock_guard<std::mutex> lk(mu_);
    if (!arrays_[i]) todo.push_back(i);
  }
  const std::map<size_t, std::exception_ptr> failed = open_parts(std::move(todo));
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (i >= opened) {
      out.push_back({parts_[i].file, {}});  // beyond the bound: not opened, not held
      continue;
    }
    if (failed.count(i)) continue;  // cannot be read anyway: its reads say why
    try {
      part_array(i)->source_files(out, open_at_most);
    } catch (const std::exception&) {
    }
  }
}

HeldSources hold_sources(FdCache& fds, const Array& a) {
  HeldSources h;
  std::vector<SourceFile> files;
  a.source_files(files, fds.hold_limit());
  std::set<std::string> seen, paths;
  for (const SourceFile& f : files) {
    paths.insert(f.path);
    if (f.id.ino == 0) continue;
    if (!seen.insert(f.path + '\0' + std::to_string(f.id.ino) + ':' + std::to_string(f.id.mtime_ns)).second) continue;
    bool bound = false;
    if (auto held = fds.hold(f.path, f.id, &bound)) h.held.push_back(std::move(held));
    else if (bound) ++h.refused;
  }
  // Files whose identity is unknown (parts not opened: beyond the bound) count as refused.
  std::set<std::string> known;
  for (const SourceFile& f : files)
    if (f.id.ino != 0) known.insert(f.path);
  h.refused += paths.size() - known.size();
  h.files = paths.size();
  return h;
}

void append_run(std::vector<FileRun>& out, const std::shared_ptr<const OpenFd>& fd, uint64_t file_off, uint64_t n) {
  if (n == 0) return;
  if (!out.empty() && out.back().fd == fd && out.back().file_off + out.back().n == file_off) {
    out.back().n += n;
    return;
  }
  out.push_back({fd, file_off, n});
}

}  // namespace h5d

