// The tasks of one read, as arrays plan them (array/array.h, Array::plan) and source I/O fills
// them in (source_io.h), run together on the engine's pool (array/reader.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace h5d {

// Each task is independent and may run on any thread; all of them together write the requested
// region. A task reports failure by throwing h5d::Error.
struct ReadPlan {
  std::vector<std::function<void()>> tasks;
  // The source file each task reads (file_key of its path; 0: none or several): a batch whose
  // tasks all read one file is limited to the per-file I/O depth (ThreadPool's key).
  std::vector<uint64_t> keys;
  // How large one source request of this read may grow when neighbouring chunks or byte runs
  // are merged, and at which size a long run is split (SourceIo::request_size: the read's bytes
  // spread over the I/O depth); 0: each chunk alone, runs at the largest request.
  uint64_t request = 0;
  // The read-ahead planned so far (SourceIo::plan_readahead rounds each range to whole blocks of
  // the file): file `readahead_key`'s bytes [readahead_lo, readahead_hi). A plan's regions are
  // planned one by one; the next range of the same file starts past what they asked for, so the
  // block where two meet is asked for once.
  uint64_t readahead_key = 0, readahead_lo = 0, readahead_hi = 0;
  void add(std::function<void()> task, uint64_t key = 0) {
    tasks.push_back(std::move(task));
    keys.push_back(key);
  }
  void append(ReadPlan&& o) {
    for (size_t i = 0; i < o.tasks.size(); ++i) add(std::move(o.tasks[i]), i < o.keys.size() ? o.keys[i] : 0);
    o.tasks.clear();
    o.keys.clear();
  }
  // The key shared by every task, or 0.
  uint64_t common_key() const {
    if (keys.empty() || keys.size() != tasks.size()) return 0;
    for (uint64_t k : keys)
      if (k != keys[0]) return 0;
    return keys[0];
  }
};

// The key of a source file for ReadPlan::keys.
uint64_t file_key(const std::string& path);

}  // namespace h5d
