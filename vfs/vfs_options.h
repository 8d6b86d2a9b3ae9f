// Options owned by the vfs layer (filled in by config/, which is the only place that parses them).
#pragma once
#include <cstdint>
#include <string>

namespace h5d::vfs {

enum class RunViewMode { Auto, Off, PerFile };

struct VfsOptions {
  // EuXFEL run view (vfs/run_view.*): auto = directories recognised as runs are shown as runs,
  // off = plain files only, per_file = runs, and beside each run view its files on their own.
  RunViewMode run_view = RunViewMode::Auto;
  // EXtra-data's RunDirectory(inc_suspect_trains=...), default True as there: trains flagged
  // invalid (INDEX/flag) are kept in run views.
  bool inc_suspect_trains = true;
  // Sequential prefetch per open file: the first window is 1 MiB + 128 KiB (the kernel's own
  // read-ahead adds 128 KiB to what the reader asked for), doubled while reads stay sequential,
  // capped at max; reset by a seek farther than seek_tolerance.
  uint64_t prefetch_initial = (1ull << 20) + (128ull << 10);
  uint64_t prefetch_max = 64ull << 20;
  uint64_t prefetch_seek_tolerance = 1ull << 20;
  // ... and starts only once a stream has gone this far (vfs/read_policy.h says why).
  uint64_t prefetch_after = 4ull << 20;
  // Sources that change while mounted (docs/semantics.md, "Files that change"): a directory shown
  // for an HDF5 file or a run is checked against its source (stat calls) at most once per this
  // many seconds when it is looked up, and listed again when it changed; the kernel keeps the
  // names below it at most as long. 0: sources are taken as never changing (names cached for
  // entry_timeout, listings for the mount's life).
  double revalidate = 1.0;
  // Non-array datasets whose value has at most this many elements show it in their .json.
  uint64_t small_value_elements = 1000;
  // -o writable: new HDF5 files, groups and datasets can be created and written (vfs/writable.*).
  bool writable = false;
  // -o uid=, gid=, umask=: the owner, group and permission bits shown for every entry instead of
  // the source's (-1: the source's). With umask, directories show 0777 & ~umask, files
  // 0666 & ~umask, write bits dropped unless writable.
  int64_t show_uid = -1;
  int64_t show_gid = -1;
  int umask = -1;
  // The mount point (absolute, resolved): the plain directory provider never looks it up (a
  // symlink in the source to it, or to a path under it, is left out), so the daemon never sends
  // a request to its own mount. Empty: no exclusion.
  std::string exclude_path;
};

}  // namespace h5d::vfs
