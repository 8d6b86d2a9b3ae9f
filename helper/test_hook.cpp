// Side: helper. The test hook (test_hook.h).
#include "helper/test_hook.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace h5d::helper {
namespace {

std::string read_all_at(int fd, size_t limit) {
  std::string s(limit, '\0');
  const ssize_t n = fd >= 0 ? ::pread(fd, s.data(), s.size(), 0) : -1;
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return s;
}

// "done", or "refused (strerror)" for a result r < 0.
std::string outcome(long r) {
  return r >= 0 ? "done" : std::string("refused (") + std::strerror(errno) + ")";
}

}  // namespace

TestHook::TestHook() {
  const char* control = std::getenv("H5DIRECT_HELPER_FAULT_FILE");
  if (!control) return;
  control_ = ::open(control, O_RDONLY | O_CLOEXEC);
  status_ = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
}

TestHook::~TestHook() {
  if (control_ >= 0) ::close(control_);
  if (status_ >= 0) ::close(status_);
}

bool TestHook::apply(const std::string& key) const {
  if (control_ < 0) return false;
  std::string s = read_all_at(control_, 512);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const auto c = s.find(':');
  if (c == std::string::npos || c + 1 == s.size()) return false;
  const std::string mode = s.substr(0, c), name = s.substr(c + 1);
  if (key.find(name) == std::string::npos) return false;
  if (mode == "hang") {
    for (;;) ::pause();
  }
  if (mode == "abort") std::abort();
  if (mode == "segv") {  // the kernel's own SIGSEGV death: no sanitizer report for a planned crash
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (mode.compare(0, 6, "probe-") == 0) probe(mode.substr(6));
  return mode == "garbage";
}

void TestHook::probe(const std::string& action) const {
  const auto eq = action.find('=');
  const std::string what = action.substr(0, eq);
  const std::string path = eq == std::string::npos ? "" : action.substr(eq + 1);
  const pid_t daemon = ::getppid();
  long r = -1;
  if (what == "open") {
    r = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // the helper's own open(): asks the daemon
  } else if (what == "rawopen") {
    r = ::syscall(SYS_openat, AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC);
  } else if (what == "write") {
    r = ::syscall(SYS_openat, AT_FDCWD, path.c_str(), O_WRONLY | O_CLOEXEC);
  } else if (what == "create") {
    r = ::syscall(SYS_openat, AT_FDCWD, path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } else if (what == "socket") {
    r = ::socket(AF_INET, SOCK_STREAM, 0);
  } else if (what == "exec") {
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    r = ::execve("/bin/true", argv, nullptr);
  } else if (what == "fork") {
    r = ::fork();
    if (r == 0) ::_exit(0);
  } else if (what == "ptrace") {
    r = ::ptrace(PTRACE_ATTACH, daemon, nullptr, nullptr);
  } else if (what == "signal") {
    r = ::kill(daemon, SIGTERM);
  } else if (what == "mmapexec") {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r = p == MAP_FAILED ? -1 : 0;
  } else if (what == "status") {
    std::string lines;
    const std::string s = read_all_at(status_, 8192);
    for (const char* k : {"Uid:", "CapEff:", "CapPrm:", "NoNewPrivs:", "Seccomp:"}) {
      const auto at = s.find(std::string("\n") + k);
      if (at != std::string::npos) lines += s.substr(at + 1, s.find('\n', at + 1) - at - 1) + "; ";
    }
    fail(EIO, "probe status: " + lines);
  } else {
    fail(EINVAL, "probe " + what + ": no such probe");
  }
  const std::string result = outcome(r);
  if (r >= 0 && (what == "open" || what == "rawopen" || what == "write" || what == "create" || what == "socket")) {
    ::close(static_cast<int>(r));
  }
  fail(EIO, "probe " + action + ": " + result);
}

}  // namespace h5d::helper
