// One way for errors to travel through core: exceptions of type h5d::Error carrying an errno
// value and a message with context (file, dataset, chunk). They become errno replies in exactly
// one place (fusefs), where they are logged once.
#pragma once
#include <cerrno>
#include <stdexcept>
#include <string>

namespace h5d {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Damaged, truncated or undecodable data: reads that touch it fail with EIO.
[[noreturn]] inline void fail_data(const std::string& msg) { throw Error(EIO, msg); }
[[noreturn]] inline void fail(int code, const std::string& msg) { throw Error(code, msg); }

// Re-throws the current exception with `context` prefixed ("file.h5 /dset chunk (0,3): ...").
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace h5d
