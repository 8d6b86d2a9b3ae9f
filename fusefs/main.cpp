#include <cstring>
#include <string>
#include <vector>

#include "fusefs/info.h"
#include "fusefs/mount.h"

// `h5direct info PATH` (a run's summary); anything else mounts.
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "info") == 0) {
    std::string prog = argv[0];
    prog = prog.substr(prog.rfind('/') == std::string::npos ? 0 : prog.rfind('/') + 1);
    return h5d::fusefs::run_info(prog.empty() ? "h5direct" : prog,
                                 std::vector<std::string>(argv + 2, argv + argc));
  }
  return h5d::fusefs::run_mount(argc, argv);
}
