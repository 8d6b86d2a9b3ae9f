// File byte runs of dataset arrays (see dataset_array.h).
#include "core/array/dataset_array.h"

#include <algorithm>

#include <fcntl.h>

#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/error.h"
#include "core/fmt/chunk_index.h"

namespace h5d::detail {

void check_in_file(const FileIdentity& id, const std::string& path, uint64_t addr, uint64_t n,
                   const std::string& what) {
  if (id.ino == 0) return;  // not stat'ed: pread finds out
  const uint64_t size = static_cast<uint64_t>(id.size);
  if (addr <= size && n <= size - addr) return;
  // Only on failure: the end the superblock stores, so the message says the file was cut.
  uint64_t stored = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) stored = fmt::read_stored_end(OpenFd(fd, path, id));  // OpenFd closes fd
  const std::string why = stored > size ? fmt::truncated_message(size, stored)
                                        : "the file has " + std::to_string(size) + " bytes";
  fail_data(what + " at file offset " + std::to_string(addr) + " (" + std::to_string(n) +
            " bytes): past the end of the file (" + why + ")");
}

void collect_runs(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r, const DestView& dst,
                  std::vector<Run>& runs) {
  const size_t rank = shape.size();
  if (rank == 0) {
    runs.push_back({addr, dst.base, itemsize});
    return;
  }
  const auto sst = c_strides(shape, itemsize);
  size_t inner = rank;
  uint64_t run = itemsize;
  while (inner > 0) {
    size_t k = inner - 1;
    if (dst.strides[k] != static_cast<int64_t>(run) || sst[k] != static_cast<int64_t>(run)) break;
    run *= r.count[k];
    inner = k;
  }
  if (inner == rank) {  // destination not contiguous even in its last dimension: element runs
    inner = rank - 1;
    run = itemsize;
  }
  Shape idx(inner, 0);
  const size_t n_outer = inner;
  for (;;) {
    uint64_t s = addr;
    uint8_t* d = dst.base;
    for (size_t k = 0; k < rank; ++k) s += r.start[k] * static_cast<uint64_t>(sst[k]);
    for (size_t k = 0; k < n_outer; ++k) {
      s += idx[k] * static_cast<uint64_t>(sst[k]);
      d += static_cast<int64_t>(idx[k]) * dst.strides[k];
    }
    if (inner == rank - 1 && run == itemsize && r.count[rank - 1] > 1 && dst.strides[rank - 1] != static_cast<int64_t>(itemsize)) {
      for (uint64_t i = 0; i < r.count[rank - 1]; ++i)
        runs.push_back({s + i * itemsize, d + static_cast<int64_t>(i) * dst.strides[rank - 1], itemsize});
    } else {
      if (!runs.empty() && runs.back().src + runs.back().n == s && runs.back().dst + runs.back().n == d)
        runs.back().n += run;
      else
        runs.push_back({s, d, run});
    }
    size_t k = n_outer;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < r.count[k]) break;
      idx[k] = 0;
    }
  }
}

void plan_runs(Engine& engine, const std::string& path, const FileIdentity& id, const std::string& what,
               std::vector<Run>& runs, ReadPlan& plan) {
  const uint64_t piece = plan.request ? plan.request : Engine::kMaxRequest;
  const uint64_t key = file_key(path);
  std::vector<Run> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    plan.add([&engine, path, id, what, b = std::move(batch)] {
      auto fd = engine.fds().get(path, &id);
      for (const Run& r : b) engine.source_read(fd->fd(), r.dst, r.n, r.src, what);
      engine.fds().recheck(path, id);
    }, key);
    batch.clear();
    batch_bytes = 0;
  };
  for (Run r : runs) {
    if (r.n >= Engine::kMinRequest) {  // a request of its own, or several in parallel
      flush();
      const uint64_t n_pieces = (r.n + piece - 1) / piece;
      const uint64_t each = (r.n + n_pieces - 1) / n_pieces;  // about equal: no short tail request
      while (r.n > 0) {
        const uint64_t n = Engine::request_end(r.src, each, r.src + r.n) - r.src;
        batch.push_back({r.src, r.dst, n});
        flush();
        r.src += n;
        r.dst += n;
        r.n -= n;
      }
      continue;
    }
    if (batch_bytes + r.n > Engine::kMinRequest) flush();
    batch.push_back(r);
    batch_bytes += r.n;
  }
  flush();
}

void plan_readahead(Engine& engine, const std::string& path, const FileIdentity& id, const std::string& what,
                    std::vector<Run>& runs, ReadPlan& plan) {
  if (runs.empty()) return;
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.src < b.src; });
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, length)
  for (const Run& r : runs) {
    if (!ranges.empty() && r.src <= ranges.back().first + ranges.back().second + 4096)
      ranges.back().second = std::max(ranges.back().second, r.src + r.n - ranges.back().first);
    else
      ranges.emplace_back(r.src, r.n);
  }
  const uint64_t piece = std::min(plan.request ? plan.request : Engine::kMinRequest, Engine::kMaxScratchRequest);
  const uint64_t key = file_key(path);
  // A range starts and ends on multiples of kMinRequest in the file (not past the file's end):
  // the stream reads on from its end (forward) or its start (backward) next, and the next range's
  // block there is then in the page cache or on its way (the client asks only for pages it
  // lacks, and waits for those being read), so its requests start on that multiple too
  // (Engine::request_end). Ranges cut where the decode-ahead's windows end made a short request
  // at each end: 1,500 requests on the emulated storage for a cold 157 MB copy where 1,200 do.
  const uint64_t a = Engine::kMinRequest;
  for (auto& range : ranges) {
    const uint64_t end = range.first + range.second;
    uint64_t up = (end + a - 1) / a * a;
    if (id.size > 0) up = std::min(up, std::max(end, static_cast<uint64_t>(id.size)));
    range.first = range.first / a * a;
    range.second = up - range.first;
  }
  for (const auto& range : ranges) {
    uint64_t off = range.first, len = range.second;  // not a structured binding: lambdas capture these
    if (plan.readahead_key == key && off < plan.readahead_hi && off >= plan.readahead_lo) {
      if (off + len <= plan.readahead_hi) continue;  // asked for already
      len -= plan.readahead_hi - off;
      off = plan.readahead_hi;
    }
    if (plan.readahead_key == key && off == plan.readahead_hi) {
      plan.readahead_hi = off + len;
    } else {
      plan.readahead_key = key;
      plan.readahead_lo = off;
      plan.readahead_hi = off + len;
    }
    while (len > 0) {
      const uint64_t n = Engine::request_end(off, piece, off + len) - off;
      plan.add([&engine, path, id, what, off, n] {
        try {
          auto fd = engine.fds().get(path, &id);
          if (!engine.read_into_page_cache(fd->fd(), off, n, what + " (read-ahead)", Engine::ReadKind::ReadAhead))
            engine.stats().readahead_resident_bytes.fetch_add(n, std::memory_order_relaxed);
        } catch (const std::exception&) {
          // Read-ahead only: the reader's own read reports what is wrong.
        }
      }, key);
      off += n;
      len -= n;
    }
  }
}

Run file_span(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r) {
  const auto st = c_strides(shape, itemsize);
  uint64_t lo = addr, hi = addr + itemsize;
  for (size_t k = 0; k < shape.size(); ++k) {
    lo += r.start[k] * static_cast<uint64_t>(st[k]);
    hi += (r.start[k] + r.count[k] - 1) * static_cast<uint64_t>(st[k]);
  }
  return {lo, nullptr, hi - lo};
}

}  // namespace h5d::detail
