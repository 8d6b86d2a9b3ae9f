// Side: daemon. The one place where the write path chooses between its two WriteFiles: a writer
// process (remote_file.cpp) where the engine has HDF5 helpers (the daemon), libhdf5 in process
// (local_file.cpp, registered by the helper-side library) where it has none (unit tests, tools).
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/write/write_internal.h"

namespace h5d {

namespace detail {
LocalWriteFileFactory& local_write_file_factory() {
  static LocalWriteFileFactory f = nullptr;
  return f;
}
}  // namespace detail

std::unique_ptr<WriteFile> create_write_file(Engine& engine, const std::string& path, dev_t& dev, ino_t& ino) {
  if (HelperPool* hp = engine.helpers()) return detail::make_remote_write_file(hp->options(), path, dev, ino);
  if (detail::LocalWriteFileFactory make = detail::local_write_file_factory()) return make(path, dev, ino);
  fail(EINVAL, "writing " + path + ": this program has no libhdf5 of its own (the daemon writes through writer processes)");
}

}  // namespace h5d
