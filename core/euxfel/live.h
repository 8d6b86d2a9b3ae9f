// Runs being written (docs/euxfel.md, "Runs being written"): noticing that a run directory
// changed, cheaply, and leaving out the files a libhdf5 writer still has open.
#pragma once
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "core/engine/fd_cache.h"

namespace h5d::euxfel {

// True when the file's superblock (version 2 or 3: libhdf5's latest format, SWMR or not) has its
// file consistency flags set: a libhdf5 writer has it open for writing (bit 0) or SWMR writing
// (bit 2). Its metadata on disk may be incomplete, and libhdf5 refuses to open it ("file is
// already open for write"). Superblocks 0 and 1 record no such flag: false. Reads 16 bytes at
// the signature (offset 0, 512, 1024, ...: a user block may come first); false when unreadable.
bool open_for_writing(const std::string& path);
// The same for many files, on up to 16 threads at once (on storage where every read is a round
// trip, 43 files' superblocks one after another cost 43 round trips). One flag per path.
std::vector<uint8_t> open_for_writing(const std::vector<std::string>& paths);

// Logs, once per path for the daemon's life, that the file is left out of its run while it is
// being written (a run listed again every time it changes would else log it again each time).
void note_left_out_while_written(const std::string& path);

// What a run directory looks like, from stat calls: its mtime (files added, removed, renamed)
// and the identity (inode, size, mtime) of each of its .h5 files; a file being written counts
// as "being written" whatever its size (it grows all the time; it joins once closed).
class RunDirState {
 public:
  // `prev`: the state taken before; superblocks are read only for files whose identity changed
  // since or that were being written then.
  static RunDirState take(const std::string& dir, const RunDirState* prev = nullptr);
  bool operator==(const RunDirState& o) const;
  bool operator!=(const RunDirState& o) const { return !(*this == o); }

 private:
  struct FileState {
    std::string name;
    FileIdentity id;
    bool writing = false;
  };
  bool ok_ = false;  // the directory could be read
  timespec mtime_{};
  std::vector<FileState> files_;  // sorted by name
};

}  // namespace h5d::euxfel
