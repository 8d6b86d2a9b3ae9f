// Side: both. What the files of the write path (core/write/) share only among themselves: the
// typestr check of plan_dataset (assemble.cpp), the wire form of a NewDataset (remote_file.cpp),
// and the two WriteFiles write_file_factory chooses between (write_file.cpp). No libhdf5 here.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/write/writer.h"

namespace h5d {
struct HelperOptions;
namespace proto {
class Out;
}  // namespace proto
}  // namespace h5d

namespace h5d::detail {

// A numpy typestr checked against what the writer can make ("<u2", ">f8", "|b1", "<c8", "|S16").
struct TypeStr {
  char kind = 0;
  bool big_endian = false;
  size_t size = 0;
};
// Error(EINVAL) for any other typestr (assemble.cpp).
TypeStr parse_typestr(const std::string& ts);

// A NewDataset in a request of the daemon (put_spec) and read back in the writer process
// (get_spec, which checks what it reads). remote_file.cpp.
void put_spec(proto::Out& o, const NewDataset& d);
NewDataset get_spec(proto::In& in);

// The daemon's WriteFile: one writer process per file (remote_file.cpp).
std::unique_ptr<WriteFile> make_remote_write_file(const HelperOptions& opts, const std::string& path, dev_t& dev,
                                                  ino_t& ino);
// The local WriteFile (libhdf5 in this process, helper/local_file.cpp) as the helper-side library
// registers it (helper/h5local.cpp, with the local
// metadata); nullptr in a program without that library (mount.h5direct: it writes through
// writer processes only).
using LocalWriteFileFactory = std::unique_ptr<WriteFile> (*)(const std::string& path, dev_t& dev, ino_t& ino);
LocalWriteFileFactory& local_write_file_factory();

}  // namespace h5d::detail
