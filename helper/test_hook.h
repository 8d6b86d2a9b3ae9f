// Side: helper. The helper's test hook, inert unless H5DIRECT_HELPER_FAULT_FILE names a file
// (the isolation and sandbox tests set it; nothing else does). The file is opened once, before
// the sandbox, and read again at each request, so a test can turn a fault on and off. While it
// holds "MODE:NAME", every request about a file whose path contains NAME:
//   hang, abort, segv   hangs, aborts, crashes (the kernel's own SIGSEGV)
//   garbage             is answered with garbage
//   probe-ACTION        runs ACTION inside the sandbox, as code injected into the helper by a
//                       crafted file would, and fails the request with what happened
//                       ("probe ACTION: refused (errno)" / "probe ACTION: done"), unless the
//                       sandbox killed the helper for it. ACTION: open=PATH (read PATH through
//                       the helper's open(), which asks the daemon), rawopen=PATH (the openat
//                       system call itself), write=PATH (open PATH for writing), create=PATH,
//                       socket, exec, fork, ptrace (the daemon), signal (SIGTERM to the daemon),
//                       mmapexec (executable memory), status (answers with /proc/self/status's
//                       Uid, CapEff, NoNewPrivs, Seccomp lines, read through the descriptor the
//                       hook opened before the sandbox).
// Reading an attribute is also checked as "FILE@ATTRIBUTE": "segv:@crash_me" crashes the helper
// at every attribute named crash_me (garbage: that attribute's read fails).
#pragma once
#include <string>

namespace h5d::helper {

class TestHook {
 public:
  // Opens the control file named by H5DIRECT_HELPER_FAULT_FILE (and /proc/self/status for the
  // status probe); call before the sandbox. Inert when the variable is not set.
  TestHook();
  ~TestHook();
  TestHook(const TestHook&) = delete;
  TestHook& operator=(const TestHook&) = delete;
  bool active() const { return control_ >= 0; }
  // Applies the hook to a request about `key` (a file, or FILE@ATTRIBUTE): hangs, dies, or
  // returns true when the request is to be answered with garbage; a probe throws Error(EIO).
  bool apply(const std::string& key) const;

 private:
  void probe(const std::string& action) const;
  int control_ = -1;
  int status_ = -1;  // /proc/self/status, opened before the sandbox
};

}  // namespace h5d::helper
