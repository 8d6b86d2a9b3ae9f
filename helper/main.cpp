// h5direct-helper: runs the daemon's libhdf5 calls in a process of its own (the daemon's side:
// core/h5lib/h5helper.h; this folder is the helper side, every libhdf5 call of h5direct).
// Started by mount.h5direct with one end of a socketpair as descriptor 3; answers requests until
// the daemon closes it, and dies with the daemon.
#include <malloc.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "helper/serve.h"
#include "helper/h5lib.h"
#include "core/log.h"

int main(int argc, char** argv) {
  int fd = -1;
  long parent = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--fd") == 0) fd = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--parent") == 0) parent = std::atol(argv[i + 1]);
  }
  if (fd < 0) {
    std::fprintf(stderr, "usage: h5direct-helper --fd N [--parent PID] (started by mount.h5direct)\n");
    return 2;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent > 0 && ::getppid() != parent) return 0;  // the daemon died before we got here
  ::signal(SIGINT, SIG_IGN);  // the daemon decides when we stop (it closes our socket)
  // A daemon (not -f) has its stdio on /dev/null and logs to syslog: so do we then.
  struct stat st;
  const bool devnull = ::fstat(2, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  if (devnull) {
    ::openlog("h5direct-helper", LOG_PID, LOG_DAEMON);
    h5d::log::set_sink([](h5d::log::Level l, const std::string& m) {
      const int prio = l == h5d::log::Level::Error ? LOG_ERR : l == h5d::log::Level::Warn ? LOG_WARNING : LOG_INFO;
      ::syslog(prio, "%s", m.c_str());
    });
  } else {
    h5d::log::set_sink([](h5d::log::Level, const std::string& m) {
      std::fprintf(stderr, "h5direct-helper[%d]: %s\n", static_cast<int>(::getpid()), m.c_str());
    });
  }
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
  // CPU -15% (docs/benchmarks.md).
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);
  h5d::h5::init_library();
  return h5d::helper::serve(fd);
}
