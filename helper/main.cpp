// h5direct-helper: runs the daemon's libhdf5 calls in a process of its own (the daemon's side:
// core/h5lib/h5helper.h; this folder is the helper side, every libhdf5 call of h5direct).
// Started by mount.h5direct with one end of a socketpair as descriptor 3; loads libhdf5 and its
// filter plugins, enters its sandbox (helper/sandbox.h), says what the sandbox holds, then
// answers requests until the daemon closes the socket, and dies with the daemon.
#include <malloc.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/h5lib/sandbox_plan.h"
#include "core/log.h"
#include "helper/channel.h"
#include "helper/h5lib.h"
#include "helper/sandbox.h"
#include "helper/serve.h"
#include "helper/test_hook.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: h5direct-helper --fd N [--parent PID] [--sandbox all|strict|log|off] [--timeout-ms MS] "
               "[--writer] (started by mount.h5direct)\n");
  return 2;
}

void set_log_sink() {
  // A daemon (not -f) has its stdio on /dev/null and logs to syslog: so do we then, through a
  // socket connected now (the sandbox allows no new one).
  struct stat st;
  const bool devnull = ::fstat(2, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  if (devnull) {
    ::openlog("h5direct-helper", LOG_PID | LOG_NDELAY, LOG_DAEMON);
    h5d::log::set_sink([](h5d::log::Level l, const std::string& m) {
      const int prio = l == h5d::log::Level::Error ? LOG_ERR : l == h5d::log::Level::Warn ? LOG_WARNING : LOG_INFO;
      ::syslog(prio, "%s", m.c_str());
    });
  } else {
    h5d::log::set_sink([](h5d::log::Level, const std::string& m) {
      std::fprintf(stderr, "h5direct-helper[%d]: %s\n", static_cast<int>(::getpid()), m.c_str());
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  int fd = -1;
  long parent = -1;
  unsigned timeout_ms = 0;
  h5d::SandboxMode mode = h5d::SandboxMode::All;
  auto role = h5d::helper::Role::Reader;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--writer") {
      role = h5d::helper::Role::Writer;
      continue;
    }
    if (!v) return usage();
    if (a == "--fd") fd = std::atoi(v);
    else if (a == "--parent") parent = std::atol(v);
    else if (a == "--timeout-ms") timeout_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    else if (a != "--sandbox" || !h5d::parse_sandbox_mode(v, mode)) return usage();
    ++i;
  }
  if (fd < 0) return usage();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent > 0 && ::getppid() != parent) return 0;  // the daemon died before we got here
  ::signal(SIGINT, SIG_IGN);  // the daemon decides when we stop (it closes our socket)
  set_log_sink();
  // No byte of one file may reach the reply for another through memory libhdf5 leaves
  // unwritten (a damaged scale-offset chunk decodes into a malloc'ed buffer it fills only in
  // part): every allocation starts zeroed (M_PERTURB fills new blocks with ~0xff and freed ones
  // with 0xff), and libhdf5's free lists hand their blocks back to malloc after every request
  // (serve: h5::release_free_lists) instead of reusing them unwiped for another file's request.
  // Costs a memset per allocation, on the library path only.
  ::mallopt(M_PERTURB, 0xff);
  // Every file libhdf5 opens allocates a 0.5 MiB cache structure, and a converting read up to
  // its transfer buffer (h5::transfer_for): blocks above glibc's first mmap threshold (128 KiB),
  // so each came from a fresh mmap (or a heap grown and trimmed again) whose pages the wipe above
  // faulted in anew, file after file. Blocks up to 4 MiB stay on the heap, and up to 16 MiB of
  // free heap is kept: one request's working set, reused (and wiped) by the next. Larger blocks
  // (library reads of data) are mapped and unmapped as before. Listing a 340-file run: helper
  // CPU -15% (docs/benchmarks.md, "What each mechanism buys").
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);
  // Everything that reads a file of the system is done before the sandbox, which allows none:
  // the time zone (log stamps), libhdf5 and every filter plugin it could load later.
  ::tzset();
  h5d::h5::init_library();
  h5d::h5::load_filter_plugins();
  const h5d::helper::TestHook hook;
  h5d::helper::Channel ch(fd);
  h5d::helper::set_channel(&ch);
  h5d::SandboxPlan held;
  try {
    held = h5d::helper::enter_sandbox(h5d::plan_sandbox(h5d::probe_kernel(), mode), role, {});
  } catch (const std::exception& e) {
    h5d::log::error(e.what());
    return 3;
  }
  // From here on every open asks the daemon (helper/libc_open.cpp), unless there is no sandbox.
  h5d::helper::set_opens_brokered(held.mode != h5d::SandboxMode::Off);
  h5d::proto::Out report;
  report.str(h5d::describe(held));
  if (!ch.send(h5d::proto::kSandboxReport, 0, report.data())) return 0;
  const int status = h5d::helper::serve(ch, hook, timeout_ms ? timeout_ms / 1000 + 1 : 0);
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer's check at exit stops the threads with ptrace from a process it clones: calls
  // the sandbox kills for. The helper side's code is leak-checked in process by the unit tests.
  if (held.seccomp) ::_exit(status);
#endif
  return status;
}
