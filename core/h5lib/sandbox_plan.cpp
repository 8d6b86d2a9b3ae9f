// Side: daemon. The sandbox's plan (sandbox_plan.h): the kernel probed, the layers chosen.
#include "core/h5lib/sandbox_plan.h"

#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace h5d {

const char* sandbox_mode_name(SandboxMode m) {
  switch (m) {
    case SandboxMode::All: return "all";
    case SandboxMode::Strict: return "strict";
    case SandboxMode::Log: return "log";
    case SandboxMode::Off: return "off";
  }
  return "?";
}

bool parse_sandbox_mode(const std::string& s, SandboxMode& out) {
  for (SandboxMode m : {SandboxMode::All, SandboxMode::Strict, SandboxMode::Log, SandboxMode::Off}) {
    if (s == sandbox_mode_name(m)) {
      out = m;
      return true;
    }
  }
  return false;
}

namespace {

// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the highest ABI the kernel
// supports, or an error (ENOSYS: no such call; EOPNOTSUPP: built but not enabled at boot).
int landlock_abi() {
#ifdef SYS_landlock_create_ruleset
  constexpr unsigned kVersion = 1u << 0;  // LANDLOCK_CREATE_RULESET_VERSION
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
#else
  return 0;
#endif
}

// Whether seccomp filters can be installed: SECCOMP_GET_ACTION_AVAIL of the action the filter
// uses to kill (a kernel or container without filters answers ENOSYS, EINVAL or EPERM).
bool seccomp_filters() {
#if defined(SYS_seccomp) && defined(SECCOMP_GET_ACTION_AVAIL)
  uint32_t action = SECCOMP_RET_TRAP;
  return ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
#else
  return false;
#endif
}

// A process of uid 0 that execs a program without file capabilities gets its bounding set as
// its capabilities: what a helper spawned by this process (the daemon) or the helper itself has.
bool in_bounding_set(cap_value_t c) { return cap_get_bound(c) == 1; }

}  // namespace

KernelReport probe_kernel() {
  KernelReport k;
  k.seccomp = seccomp_filters();
  k.landlock_abi = landlock_abi();
  k.root = ::geteuid() == 0;
  k.can_switch_uid = k.root && in_bounding_set(CAP_SETUID) && in_bounding_set(CAP_SETGID);
  return k;
}

SandboxPlan plan_sandbox(const KernelReport& k, SandboxMode mode) {
  SandboxPlan p;
  p.mode = mode;
  if (mode == SandboxMode::Off) return p;
  // Always available (prctl since Linux 3.5, setrlimit, capset).
  p.limits = true;
  p.no_new_privs = true;
  p.not_dumpable = true;
  p.drop_caps = true;
  if (k.root) {
    p.drop_uid = k.can_switch_uid;
    if (!k.can_switch_uid) p.missing.push_back("unprivileged uid (no CAP_SETUID/CAP_SETGID to leave uid 0)");
  }
  if (k.seccomp) {
    p.seccomp = true;
    p.seccomp_log = mode == SandboxMode::Log;
  } else {
    p.missing.push_back("seccomp (no seccomp filters in this kernel or container)");
  }
  if (k.landlock_abi > 0) {
    p.landlock_abi = k.landlock_abi;
  } else {
    p.missing.push_back("landlock (not in this kernel, or not enabled at boot: lsm=landlock)");
  }
  return p;
}

std::string describe(const SandboxPlan& p) {
  if (p.mode == SandboxMode::Off) return "off";
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (p.no_new_privs) add("no_new_privs");
  if (p.not_dumpable) add("not dumpable");
  if (p.drop_caps) add(p.drop_uid ? "capabilities dropped (uid " + std::to_string(kUnprivilegedUid) + ")"
                                  : "capabilities dropped");
  if (p.landlock_abi > 0) add("landlock ABI " + std::to_string(p.landlock_abi));
  if (p.seccomp) add(p.seccomp_log ? "seccomp (log only)" : "seccomp");
  if (p.limits) add("limits");
  if (!p.missing.empty()) {
    s += "; missing: ";
    for (size_t i = 0; i < p.missing.size(); ++i) s += (i ? "; " : "") + p.missing[i];
  }
  return s;
}

std::vector<std::pair<std::string, bool>> layers_held(const std::string& report) {
  const std::string held = report.substr(0, report.find("; missing"));
  auto has = [&](const char* s) { return held.find(s) != std::string::npos; };
  return {{"no_new_privs", has("no_new_privs")},
          {"not_dumpable", has("not dumpable")},
          {"capabilities", has("capabilities dropped")},
          {"landlock", has("landlock ABI")},
          {"seccomp", has("seccomp") && !has("seccomp (log only)")},
          {"limits", has("limits")}};
}

std::string syscall_name(uint32_t nr) {
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, static_cast<int>(nr));
  std::string s = name ? name : "system call " + std::to_string(nr);
  std::free(name);
  return s;
}

}  // namespace h5d
