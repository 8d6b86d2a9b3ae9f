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
