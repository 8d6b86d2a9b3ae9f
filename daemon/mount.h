// mount.h5direct: parse options, check SOURCE and MOUNTPOINT, mount, daemonize once the mount
// exists, serve until unmounted or signalled (SIGINT, SIGTERM, SIGHUP unmount cleanly).
#pragma once

#include <string>

namespace h5d::daemon {

// The name the program was invoked by (argv[0]'s last component: h5direct, mount.h5direct),
// which its messages carry; "h5direct" when there is none.
std::string program_name(const char* argv0);

// Returns the process exit status.
int run_mount(int argc, char** argv);

}  // namespace h5d::daemon
