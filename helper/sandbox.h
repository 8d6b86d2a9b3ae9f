// Side: helper. Entering the sandbox a helper process plans (core/h5lib/sandbox_plan.h): limits,
// an unprivileged uid and no capabilities, no_new_privs, not dumpable, Landlock (no file system,
// no TCP, no signals out) and the system call filter (libseccomp). Called by h5direct-helper's
// main() once libhdf5 and its filter plugins are loaded and before the first request, from the
// process's only thread; and by the sandbox tests (tests/programs/sandbox_probe.cpp), through the same
// function. docs/architecture.md, "The sandbox", says what each layer stops and what is left.
#pragma once
#include <cstdint>
#include <string>

#include "core/h5lib/sandbox_plan.h"

namespace h5d::helper {

// A read helper opens files read-only (through the broker); a writer process (-o writable)
// writes its one file.
enum class Role { Reader, Writer };

struct SandboxLimits {
  // RLIMIT_DATA: a library read's reply is at most proto::kMaxDataReply (1 GiB), held up to three
  // times (libhdf5's buffer, the reply built, the bytes sent), plus libhdf5's metadata, thread
  // stacks and the allocator's heaps: a decompression bomb or a runaway allocation fails there.
  uint64_t memory_bytes = 6ull << 30;
  // RLIMIT_NOFILE: the helper's descriptor cache (128) and libhdf5's open files (64), with room
  // for the external links, external files and VDS sources they open.
  unsigned open_files = 512;
};

// Enters every layer of `plan` that this process can set, in order, and returns the plan as it
// holds (a layer that failed is moved to `missing`). With mode strict a layer that fails throws
// Error(EPERM) instead. A call the filter kills for is reported on the channel (channel.h), when
// the helper has one, before the helper dies of SIGSYS.
SandboxPlan enter_sandbox(const SandboxPlan& plan, Role role, const SandboxLimits& limits);

// At most `seconds` more CPU time for the request about to be served (the soft RLIMIT_CPU: the
// kernel ends a helper that spends more with SIGXCPU). hdf5_timeout bounds its wall time.
void limit_request_cpu(unsigned seconds);

}  // namespace h5d::helper
