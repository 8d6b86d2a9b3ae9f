// Side: daemon. What the sandbox of a helper process is made of on this kernel: which layers it
// can have (probe_kernel), which it will have for a mode (plan_sandbox), and how they are named
// in the log, stats.json and the metrics. The daemon plans with it at start (to log and, with
// -o sandbox=strict, to refuse to mount), each helper plans with it again and enters what it
// planned (helper/sandbox.h). No system call is made here but the probe's.
//
// The layers, each independent of the others (docs/architecture.md, "The sandbox"):
//   no_new_privs     prctl(PR_SET_NO_NEW_PRIVS): no exec can gain privileges (needed by the two below)
//   not dumpable     prctl(PR_SET_DUMPABLE, 0): no ptrace or /proc/PID/mem from the same uid
//   capabilities     none left (a root daemon's helpers also leave uid 0 for an unprivileged uid)
//   seccomp          a system call filter (libseccomp): what libhdf5, the allocator and the
//                    protocol call; the rest refused, and the calls a parser has no business
//                    making (exec, fork, ptrace, signals to others, mount, chmod, unlink...) kill it
//   landlock         no file system at all (files come from the daemon as descriptors), no TCP,
//                    and (ABI 6) no signals or abstract sockets outside the helper
//   limits           memory, CPU time per request, open files, no file growth, no core dumps
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace h5d {

// -o sandbox=: strict (refuse to run unless every layer holds), all (default: every layer the
// kernel has), log (all, but the system call filter logs what it would refuse instead of refusing:
// to learn what a libhdf5 build calls), off (no sandbox: debugging only, logged as a warning).
enum class SandboxMode { All, Strict, Log, Off };
const char* sandbox_mode_name(SandboxMode m);
// "all", "strict", "log" or "off"; false for anything else.
bool parse_sandbox_mode(const std::string& s, SandboxMode& out);

// What the kernel and the process offer, as the probe finds them.
struct KernelReport {
  bool seccomp = false;       // seccomp filters (CONFIG_SECCOMP_FILTER, not disabled by a container)
  int landlock_abi = 0;       // 0: no Landlock (kernel before 5.13, not built, or not an active LSM)
  bool root = false;          // effective uid 0: the helper can and must leave uid 0
  bool can_switch_uid = false;  // root with CAP_SETUID and CAP_SETGID in the bounding set: a helper
                                // spawned now (uid 0, so its capabilities are that set) can leave uid 0
};
KernelReport probe_kernel();

// The layers a helper sets up, in the order it sets them up.
struct SandboxPlan {
  SandboxMode mode = SandboxMode::All;
  bool limits = false;
  bool drop_uid = false;       // root: become kUnprivilegedUid / kUnprivilegedGid
  bool drop_caps = false;
  bool no_new_privs = false;
  bool not_dumpable = false;
  int landlock_abi = 0;        // 0: no Landlock layer
  bool seccomp = false;
  bool seccomp_log = false;    // the filter logs instead of refusing (mode log)
  std::vector<std::string> missing;  // layers this kernel lacks, named as in describe()
  bool complete() const { return missing.empty(); }
};
// The uid and gid a root daemon's helpers run as: the kernel's overflow ids ("nobody"), which own
// no file of the sources.
constexpr uint32_t kUnprivilegedUid = 65534;
constexpr uint32_t kUnprivilegedGid = 65534;

// Every layer the kernel has (mode all, strict, log), none (off). Pure: unit-tested.
SandboxPlan plan_sandbox(const KernelReport& k, SandboxMode mode);
// "no_new_privs, not dumpable, capabilities dropped (uid 65534), landlock ABI 7, seccomp,
// limits", then "; missing: landlock (...)" when a layer is missing; "off" for mode off.
std::string describe(const SandboxPlan& p);
// The layers a report (describe()'s text) says hold, by name: no_new_privs, not_dumpable,
// capabilities, landlock, seccomp (false in log mode: it refuses nothing), limits.
std::vector<std::pair<std::string, bool>> layers_held(const std::string& report);
// The name of system call `nr` of this machine's architecture ("execve"), or "system call NR".
std::string syscall_name(uint32_t nr);

}  // namespace h5d
