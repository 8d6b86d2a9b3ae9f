// Shared by the bench/ FUSE programs (fuse_ceiling, slowfs); libfuse-free, never core/.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

// Sets the read-ahead of the FUSE mount at `point` (spelled as /proc/self/mountinfo spells it) to
// `kb` KiB through /sys/class/bdi/MAJ:MIN/read_ahead_kb (root only). Called while INIT is
// handled: the kernel then sets the mount's read-ahead to min(this, the reply's max_readahead).
// Returns "" or what went wrong.
inline std::string set_fuse_readahead(const std::string& point, unsigned kb) {
  std::ifstream mi("/proc/self/mountinfo");
  std::string line, dev;
  while (std::getline(mi, line)) {
    std::istringstream ls(line);
    std::string id, parent, majmin, root, mounted_on;
    ls >> id >> parent >> majmin >> root >> mounted_on;
    if (mounted_on == point) dev = majmin;
  }
  if (dev.empty()) return "the mount is not in /proc/self/mountinfo";
  const std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  std::ofstream out(path);
  out << kb << "\n";
  out.flush();
  return out ? "" : "cannot write " + path + " (root only)";
}
