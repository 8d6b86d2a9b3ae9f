// Side: helper. The helper process's request loop (h5serve.cpp) and the libhdf5 side of the
// write path (local_file.cpp, write_server.cpp): what h5direct-helper's main() and the tests that
// serve in process call.
#pragma once
#include <sys/types.h>

#include <memory>
#include <string>

#include "core/h5lib/h5proto.h"
#include "core/write/writer.h"

namespace h5d {
namespace helper {

class Channel;
class TestHook;

// Answers requests on the channel with the local implementation (an Engine without helpers:
// LocalMetadata) until the daemon closes it. Returns the exit status. `hook`: the test hook
// (inert unless a test set it up); `request_cpu_s`: the CPU time one request may take (0: no
// limit; limit_request_cpu).
// A writer process (core/write/remote_file.cpp) is the same program: its first request is
// proto::Op::WriteCreateFile, and it then holds that one file open for writing.
int serve(Channel& ch, const TestHook& hook, unsigned request_cpu_s);

// The writer process's side: answers one proto::is_write_op request about `path`. `file` is
// this process's one written file, made by Op::WriteCreateFile (write_server.cpp).
std::string serve_write(std::unique_ptr<WriteFile>& file, proto::Op op, proto::In& in, const std::string& path);

}  // namespace helper

namespace detail {
// libhdf5 in this process (local_file.cpp): creates `path` (O_EXCL); `dev`, `ino`: the file made.
std::unique_ptr<WriteFile> make_local_write_file(const std::string& path, dev_t& dev, ino_t& ino);
// The path of `file` when it is one make_local_write_file made, else nullptr.
const std::string* local_write_file_path(const WriteFile& file);
}  // namespace detail
}  // namespace h5d
