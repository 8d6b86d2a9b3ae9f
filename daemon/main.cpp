#include <cstring>
#include <string>
#include <vector>

#include "daemon/info.h"
#include "daemon/mount.h"

// `h5direct info PATH` (a run's summary); anything else mounts.
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "info") == 0) {
    return h5d::daemon::run_info(h5d::daemon::program_name(argv[0]),
                                 std::vector<std::string>(argv + 2, argv + argc));
  }
  return h5d::daemon::run_mount(argc, argv);
}
