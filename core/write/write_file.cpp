// Side: both. The one place where the write path chooses between its two WriteFiles: a writer
// process (remote_file.cpp) where the engine has HDF5 helpers (the daemon), libhdf5 in process
// (local_file.cpp) where it has none (unit tests, tools). The daemon without libhdf5 (issue 28)
// takes the local branch out of its build here.
#include "core/engine/engine.h"
#include "core/write/write_internal.h"

namespace h5d {

std::unique_ptr<WriteFile> create_write_file(Engine& engine, const std::string& path, dev_t& dev, ino_t& ino) {
  if (HelperPool* hp = engine.helpers()) return detail::make_remote_write_file(hp->options(), path, dev, ino);
  return detail::make_local_write_file(path, dev, ino);
}

}  // namespace h5d
