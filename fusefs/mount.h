// mount.h5direct: parse options, check SOURCE and MOUNTPOINT, mount, daemonize once the mount
// exists, serve until unmounted or signalled (SIGINT, SIGTERM, SIGHUP unmount cleanly).
#pragma once

namespace h5d::fusefs {

// Returns the process exit status.
int run_mount(int argc, char** argv);

}  // namespace h5d::fusefs
