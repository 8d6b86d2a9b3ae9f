// Every libhdf5 call goes through here: one process-wide lock (libhdf5 is either not thread-safe
// or thread-safe by one global lock anyway; our own lock also makes call sequences atomic),
// RAII handles, and the library's error stack turned into messages. The HDF5 lock is level 3 of
// the lock hierarchy in docs/architecture.md: taken after vfs nodes, Run::mu_ and VirtualArray::mu_,
// before H5File, Engine, Writer and the leaf mutexes.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace h5d::h5 {

std::recursive_mutex& mutex();  // lock level 3 (docs/architecture.md)
using Lock = std::unique_lock<std::recursive_mutex>;
inline Lock lock() { return Lock(mutex()); }

// Silences libhdf5's own printing of error stacks (once, at first use).
void init_library();
// Hands the blocks on libhdf5's free lists back to malloc (H5garbage_collect): in a helper,
// between two requests, so that no block one file's request left behind is reused unwiped for
// another's (M_PERTURB wipes what malloc hands out). Once per request instead of no free lists
// at all: those made every libhdf5 allocation a malloc and a wipe, and listing a 340-file run
// took 2.4x the CPU (docs/benchmarks.md).
void release_free_lists();

// The current HDF5 error stack as one line (innermost message first).
std::string error_stack();

// Throws h5d::Error(code, what + ": " + error_stack()).
[[noreturn]] void fail_h5(int code, const std::string& what);

// A checked hid_t that closes itself with the right H5*close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = -1;
};

// Wraps a returned id; throws with the HDF5 error stack when it is negative.
Handle check(hid_t id, const std::string& what, int code = 5 /*EIO*/);
void check(herr_t rc, const std::string& what, int code = 5);

// A dataset transfer property list for an H5Dread of `elements` elements between `file_type` and
// `mem_type`, whose conversion buffer is as large as that read needs (at most libhdf5's default,
// 1 MiB, above which it converts in pieces). libhdf5 1.10 allocates (and zeroes) the whole default
// buffer for every converting read, even of one string: a sequence file's few small string reads
// allocated 1 MiB each (listing a 340-file run, docs/benchmarks.md).
Handle transfer_for(hid_t file_type, hid_t mem_type, uint64_t elements);

// Truncated files (h5truncated.cpp). libhdf5 refuses a file shorter than the end of address
// space its superblock stores. The helper (and only it: allow_truncated_files) retries such a
// file with a read-only driver that accepts it and fails every read reaching past the real end.
void allow_truncated_files(bool on);
bool truncated_files_allowed();
// H5Fopen of `path` read-only through that driver; its real size and stored end of address
// space. -1 when libhdf5 refuses it even so (`why`: its reason).
hid_t open_truncated(const std::string& path, uint64_t* real_size, uint64_t* eoa, std::string* why);
// A read refused past the real end of a truncated file: the file, its real size and the end of
// address space its superblock stores.
struct ReadPastEnd {
  std::string path;
  uint64_t size = 0;
  uint64_t stored_end = 0;
};
// The reads refused past a file's real end since the last call.
std::vector<ReadPastEnd> take_reads_past_end();
// How many such refusals are pending; forget_reads_past_end(n) forgets those after the first n,
// for a caller that has dealt with them (list_group leaves out a member whose object header lies
// past the cut: libhdf5 kept nothing of it).
size_t pending_reads_past_end();
void forget_reads_past_end(size_t keep);

}  // namespace h5d::h5
