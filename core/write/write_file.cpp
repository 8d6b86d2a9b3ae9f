// Side: daemon. The one place where the write path chooses between its two WriteFiles: a writer
// process (remote_file.cpp) with HDF5 helper options (the daemon), libhdf5 in process
// (helper/local_file.cpp, registered by the helper-side library) without (unit tests, tools).
#include "core/error.h"
#include "core/h5lib/h5helper.h"
#include "core/write/write_internal.h"

namespace h5d {

namespace detail {
LocalWriteFileFactory& local_write_file_factory() {
  static LocalWriteFileFactory f = nullptr;
  return f;
}
}  // namespace detail

WriteFileFactory write_file_factory(const HelperOptions& helpers) {
  if (!helpers.path.empty()) {
    return [helpers](const std::string& path, dev_t& dev, ino_t& ino) {
      return detail::make_remote_write_file(helpers, path, dev, ino);
    };
  }
  if (detail::LocalWriteFileFactory make = detail::local_write_file_factory()) return make;
  return [](const std::string& path, dev_t&, ino_t&) -> std::unique_ptr<WriteFile> {
    fail(EINVAL, "writing " + path + ": this program has no libhdf5 of its own (the daemon writes through writer processes)");
  };
}

}  // namespace h5d
