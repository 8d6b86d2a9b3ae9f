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
  // `logged`: already logged where it happened (a failed HDF5 helper: HelperPool::call), so
  // that it is one log line, not one more per place it passes through.
  Error(int code, const std::string& msg, bool logged) : std::runtime_error(msg), code_(code), logged_(logged) {}
  int code() const { return code_; }
  bool logged() const { return logged_; }

 private:
  int code_;
  bool logged_ = false;
};

// Whether `e` was logged where it happened (Error::logged).
inline bool already_logged(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err && err->logged();
}

// Damaged, truncated or undecodable data: reads that touch it fail with EIO.
[[noreturn]] inline void fail_data(const std::string& msg) { throw Error(EIO, msg); }
[[noreturn]] inline void fail(int code, const std::string& msg) { throw Error(code, msg); }

// Re-throws the current exception with `context` prefixed ("file.h5 /dset chunk (0,3): ...").
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace h5d
