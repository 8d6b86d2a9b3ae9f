#include "daemon/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace h5d::daemon {

std::string drop_privileges(bool writable) {
  if (::geteuid() != 0) return "not root: no capabilities to give up";
  std::vector<cap_value_t> keep = {CAP_DAC_READ_SEARCH, CAP_KILL, CAP_SYS_ADMIN};
  if (writable) keep.insert(keep.end(), {CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER});
  std::vector<cap_value_t> bound = keep;
  bound.insert(bound.end(), {CAP_SETUID, CAP_SETGID, CAP_SETPCAP});
  // The bounding set first: dropping from it takes CAP_SETPCAP, which the process then gives up.
  for (cap_value_t c = 0; c < static_cast<cap_value_t>(cap_max_bits()); ++c) {
    if (std::find(bound.begin(), bound.end(), c) == bound.end() && cap_drop_bound(c) != 0 && errno != EINVAL) {
      return std::string("capabilities kept (cannot drop the bounding set: ") + std::strerror(errno) + ")";
    }
  }
  cap_t caps = cap_init();
  if (!caps) return "capabilities kept (cap_init failed)";
  cap_set_flag(caps, CAP_PERMITTED, static_cast<int>(keep.size()), keep.data(), CAP_SET);
  cap_set_flag(caps, CAP_EFFECTIVE, static_cast<int>(keep.size()), keep.data(), CAP_SET);
  const int rc = cap_set_proc(caps);
  const int e = errno;
  cap_free(caps);
  if (rc != 0) return std::string("capabilities kept (") + std::strerror(e) + ")";
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  cap_t now = cap_get_proc();
  char* text = now ? cap_to_text(now, nullptr) : nullptr;
  std::string out = std::string("capabilities ") + (text ? text : "?") +
                    " (the helpers' bounding set adds cap_setuid, cap_setgid, cap_setpcap)";
  cap_free(text);
  cap_free(now);
  return out;
}

}  // namespace h5d::daemon
