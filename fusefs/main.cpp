#include <cstring>
#include <string>
#include <vector>

#include "fusefs/info.h"
#include "fusefs/mount.h"

// `h5direct info PATH` (a run's summary); anything else mounts.
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "info") == 0) {
    return h5d::fusefs::run_info(h5d::fusefs::program_name(argv[0]),
                                 std::vector<std::string>(argv + 2, argv + argc));
  }
  return h5d::fusefs::run_mount(argc, argv);
}
