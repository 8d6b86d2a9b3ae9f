// One way for errors to travel through core: exceptions of type h5d::Error carrying an errno
// value and a message with context (file, dataset, chunk). They become errno replies in exactly
// one place (fusefs), where they are logged once.
#pragma once
#include <cerrno>
#include <stdexcept>
#include <string>

namespace h5d {

// Where an error happened, as far as it is known: the source file, the dataset (or group) in
// it, and the chunk (its coordinates, "(0,3)"). Empty strings: not known. Kept with the error
// as it travels up (the innermost place wins), so that the list of recent errors
// (log::recent_errors, stats.json) names them without parsing messages.
struct Place {
  std::string file, dataset, chunk;
  bool empty() const { return file.empty() && dataset.empty() && chunk.empty(); }
};

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  // `logged`: already logged where it happened (a failed HDF5 helper: HelperPool::call), so
  // that it is one log line, not one more per place it passes through.
  Error(int code, const std::string& msg, bool logged, Place place = {})
      : std::runtime_error(msg), code_(code), logged_(logged), place_(std::move(place)) {}
  int code() const { return code_; }
  bool logged() const { return logged_; }
  const Place& place() const { return place_; }

 private:
  int code_;
  bool logged_ = false;
  Place place_;
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
// `place`: where it happened, kept unless the exception names a place already.
[[noreturn]] void rethrow_with_context(const std::string& context, const Place& place = {});
// Re-throws the current exception as it is, at `place` unless it names a place already.
[[noreturn]] void rethrow_at(const Place& place);
// The place an exception names (Error::place), empty for any other exception.
Place place_of(const std::exception& e);

}  // namespace h5d
