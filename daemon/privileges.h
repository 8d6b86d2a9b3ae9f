// What a root daemon keeps of its privileges once it serves (docs/architecture.md, "What the
// daemon keeps"). Called before the daemon starts its first thread: capabilities are a thread's,
// and every thread after inherits what this one keeps.
#pragma once
#include <string>

namespace h5d::daemon {

// Drops every capability serving does not use: kept are CAP_DAC_READ_SEARCH (read the sources
// as the users' files they are), CAP_KILL (end helpers, which run as another uid), CAP_SYS_ADMIN
// (unmount, and detach on a signal), and for -o writable CAP_DAC_OVERRIDE, CAP_CHOWN and
// CAP_FOWNER (create files in users' directories and give them to the user). The bounding set
// also keeps CAP_SETUID, CAP_SETGID and CAP_SETPCAP, which only the helpers use (to leave uid 0
// and drop their own bounding set before their sandbox). Returns what the process has now, for
// the log ("not root: ..." when there was nothing to drop); a failure is logged and served on.
std::string drop_privileges(bool writable);

}  // namespace h5d::daemon
