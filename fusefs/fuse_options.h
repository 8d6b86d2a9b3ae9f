// Options owned by the FUSE adapter (filled in by config/).
#pragma once
#include <string>

namespace h5d::fusefs {

struct FuseOptions {
  bool allow_other = false;   // needs user_allow_other in /etc/fuse.conf for non-root users
  bool allow_root = false;
  bool auto_unmount = false;  // fusermount3 unmounts when the daemon dies
  std::string fsname;         // empty: the source path
  std::string subtype = "h5direct";
  // Kernel read-ahead for the mount (root only: sysfs). -1 (default): 1024 KiB when the daemon
  // runs as root, else the kernel's; 0: keep the kernel's default (128 KiB).
  int readahead_kb = -1;
  // Files never change under a mount: cache names and attributes for a day.
  double entry_timeout = 86400.0;
  double attr_timeout = 86400.0;
  // FUSE worker threads: every request in flight holds one while it waits for its chunks, so
  // keep enough of them (and keep them: idle threads are cheap, re-creating them is not).
  unsigned max_threads = 64;
  unsigned max_idle_threads = 64;
  // After a read that decoded compressed chunks it only partly returns, push the rest of those
  // chunks into the kernel's page cache (fuse_lowlevel_notify_store): a reader that faults one
  // page at a time (mmap with little read-ahead) then costs one request per chunk.
  bool push = true;
  // Reply with bytes stored verbatim in a source file (uncompressed data) by splicing them from
  // that file into the reply (fuse_reply_data, FUSE_CAP_SPLICE_WRITE): one copy, the kernel's,
  // instead of pread into a buffer and a copy of the buffer into the reply.
  bool splice = true;
};

}  // namespace h5d::fusefs
