// sandbox_probe ACTION [PATH]: enters the sandbox of a read helper through the function the helper
// uses (helper::enter_sandbox, with the plan this kernel allows), then does what code injected
// into a helper by a crafted file would try, and says what happened. Run by
// tests/python/test_sandbox.py, once per action, as root and as an ordinary user.
//   exit 0  "refused: ..." (the call failed)
//   exit 1  "done" (the sandbox let it through: a failure of the sandbox)
//   killed by SIGSYS: the filter killed the process for the call
// ACTION: open PATH, write PATH, create PATH, socket, exec, fork, thread (a thread must work),
// ptrace PID, signal PID, mmapexec, status (prints /proc/self/status's lines of the sandbox),
// hdf5 PATH (reads PATH's HDF5 signature through a descriptor opened before the sandbox: what the
// daemon hands a helper keeps working).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/h5lib/sandbox_plan.h"
#include "helper/sandbox.h"

namespace {

int report(long r, const std::string& what) {
  if (r < 0) {
    std::printf("refused: %s: %s\n", what.c_str(), std::strerror(errno));
    return 0;
  }
  std::printf("done: %s\n", what.c_str());
  return 1;
}

int probe(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sandbox_probe ACTION [PATH|PID]\n");
    return 2;
  }
  const std::string action = argv[1];
  const std::string arg = argc > 2 ? argv[2] : "";
  // Opened before the sandbox, as the daemon's broker opens a file for a helper.
  const int before = action == "hdf5" ? ::open(arg.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  const int status = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  const h5d::SandboxPlan held =
      h5d::helper::enter_sandbox(h5d::plan_sandbox(h5d::probe_kernel(), h5d::SandboxMode::All),
                                 h5d::helper::Role::Reader, {});
  std::fprintf(stderr, "sandbox: %s\n", h5d::describe(held).c_str());
  std::fflush(stderr);
  if (action == "open") return report(::syscall(SYS_openat, AT_FDCWD, arg.c_str(), O_RDONLY), "open " + arg);
  if (action == "write") return report(::syscall(SYS_openat, AT_FDCWD, arg.c_str(), O_WRONLY), "write " + arg);
  if (action == "create")
    return report(::syscall(SYS_openat, AT_FDCWD, arg.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644), "create " + arg);
  if (action == "socket") return report(::socket(AF_INET, SOCK_STREAM, 0), "socket");
  if (action == "exec") {
    char* const args[] = {const_cast<char*>("/bin/true"), nullptr};
    return report(::execve("/bin/true", args, nullptr), "exec /bin/true");
  }
  if (action == "fork") {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    return report(p, "fork");
  }
  if (action == "thread") {  // the pool's threads must still start: refused would be a failure
    bool ran = false;
    std::thread([&] { ran = true; }).join();
    std::printf("%s: thread\n", ran ? "done" : "refused");
    return ran ? 1 : 0;
  }
  if (action == "ptrace") return report(::ptrace(PTRACE_ATTACH, std::atoi(arg.c_str()), nullptr, nullptr), "ptrace " + arg);
  if (action == "signal") return report(::kill(std::atoi(arg.c_str()), SIGTERM), "signal " + arg);
  if (action == "mmapexec") {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return report(p == MAP_FAILED ? -1 : 0, "mmap PROT_EXEC");
  }
  if (action == "hdf5") {
    char sig[8] = {};
    const ssize_t n = before >= 0 ? ::pread(before, sig, sizeof sig, 0) : -1;
    std::printf("%s: read %zd bytes, %s\n", n == 8 ? "done" : "refused", n,
                std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0 ? "HDF5 signature" : "no signature");
    return n == 8 ? 1 : 0;
  }
  if (action == "status") {
    char buf[8192];
    const ssize_t n = ::pread(status, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    std::fputs(buf, stdout);
    return 0;
  }
  std::fprintf(stderr, "sandbox_probe: no such action: %s\n", action.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int status = probe(argc, argv);
  // Not through exit(): LeakSanitizer's check at exit (sanitizer builds) stops the threads with
  // ptrace from a process it clones, calls the sandbox kills for (as in helper/main.cpp).
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(status);
}
