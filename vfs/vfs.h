// The filesystem as the FUSE adapter sees it: inode numbers in, attributes, listings and bytes
// out. Every method may throw h5d::Error (the adapter turns it into an errno reply); none holds a
// global lock while reading data.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "vfs/read_reply.h"
#include "vfs/tree.h"
#include "vfs/vfs_options.h"

namespace h5d {
class Engine;
class H5Files;
class Writer;
}

namespace h5d::vfs {

struct Attr {
  uint64_t ino = 0;
  NodeKind kind = NodeKind::File;
  uint64_t size = 0;
  mode_t mode = 0;  // type and permission bits, as st_mode
  uint32_t nlink = 1;
  // 512-byte blocks the node claims to store (st_blocks): what du adds up. Virtual files store
  // nothing (their bytes are computed when read), so none claims more than one block; a file
  // that is not empty claims exactly one, since GNU tar --sparse archives a file of size > 0
  // with no block at all as one hole, without reading it (docs/usage.md, "Shell tools").
  uint64_t blocks = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  timespec mtime{};
  timespec ctime{};
  bool is_volatile = false;  // do not cache (size and content change)
  // >= 0: shown from a source that may change (NodeMeta::live, or a directory whose listing is
  // revalidated): the kernel may keep its name (and, for a directory, its listing) at most this
  // many seconds. -1: no limit beyond the mount's timeouts.
  double cache_limit = -1;
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  NodeKind kind = NodeKind::File;
};

// The mount's timeouts (-o attr_timeout, entry_timeout): the longest the kernel keeps attributes
// and names (vfs/kernel_policy.h decides how long each answer is kept).
struct CacheTimeouts {
  double attr = 0;
  double entry = 0;
};

// What the FUSE adapter can do for a read reply, known once the kernel's INIT is answered
// (vfs/kernel_policy.h decides which a read uses).
struct ReplyMeans {
  bool splice = false;    // spliced replies: -o splice and the kernel's FUSE_CAP_SPLICE_WRITE
  size_t splice_max = 0;  // the largest request whose spliced reply fits libfuse's pipe
  bool push = false;      // pushes into the page cache: -o push and a session to push through
};

struct FsStats {
  uint64_t files = 0;     // inodes known so far
  uint64_t bytes = 0;     // 0: the tree is lazy and its total size unknown
  uint32_t name_max = 255;
  uint32_t block_size = 4096;
};

class Vfs {
 public:
  static constexpr uint64_t kRootIno = 1;
  static constexpr const char* kControlDir = ".h5direct";

  // `source` is an HDF5 file (the root shows its root group) or a directory. Throws
  // Error(ENOENT/ENOTDIR/EINVAL) when it is missing or neither. Opens nothing else.
  Vfs(Engine& engine, H5Files& files, VfsOptions opts, const std::string& source);
  ~Vfs();
  Vfs(const Vfs&) = delete;
  Vfs& operator=(const Vfs&) = delete;

  // Extension point (EuXFEL run view): call before the first access.
  void add_provider_factory(ProviderFactory factory);
  // Who is told which names of a revalidated directory changed (TreeListener, vfs/tree.h: the
  // FUSE adapter, which makes the kernel forget them); call before the first access.
  void set_listener(TreeListener* listener);

  Attr getattr(uint64_t ino);
  // `who`: the requesting user, whose access to the source is checked as the kernel would
  // decide it for the source itself (check_access: every directory on the resolved path, the
  // source's mode now), Error(EACCES) when denied; nullptr: not checked (the daemon's own use).
  // lookup shows a directory node whose source the user may reach but not read (its mode and
  // owner, as `ls -l` shows them on the source); readdir and open refuse it.
  Attr lookup(uint64_t parent, const std::string& name, const Caller* who = nullptr);  // Error(ENOENT) when missing
  std::vector<DirEntry> readdir(uint64_t ino, const Caller* who = nullptr);
  // flags as open(2): anything but O_RDONLY gives Error(EROFS) (on rw mounts: files that cannot
  // be written give EROFS or EPERM); directories give EISDIR.
  std::unique_ptr<OpenFile> open(uint64_t ino, int flags, const Caller* who = nullptr);
  // The answer to a read of `size` bytes at `off` of `file` (inode `ino`), for the adapter to
  // carry out (vfs/read_reply.h): spliced where `means` allow it and the file's bytes are stored
  // verbatim (in at most `splice_buffers` buffers), else read into `buf` (grown to `size`), with
  // the pushes the read made worth doing. The read counts as in flight while the answer lives.
  ReadReply answer_read(OpenFile& file, uint64_t ino, uint64_t off, size_t size, const ReplyMeans& means,
                        size_t splice_buffers, std::vector<char>& buf);

  // ---- rw mounts (vfs/writable.h); all give Error(EROFS) on read-only mounts ----
  // Makes the mount writable: call before the first access. The writer outlives the Vfs.
  void set_writer(Writer* writer);
  bool writable() const { return ctx_->writer != nullptr; }
  // `who` as for lookup: the parent's source must let them search and write.
  Attr mkdir(uint64_t parent, const std::string& name, mode_t mode, uid_t uid, gid_t gid,
             const Caller* who = nullptr);
  std::pair<Attr, std::unique_ptr<OpenFile>> create(uint64_t parent, const std::string& name,
                                                    mode_t mode, uid_t uid, gid_t gid,
                                                    const Caller* who = nullptr);
  size_t write(OpenFile& file, uint64_t off, size_t size, const char* buf);
  // Close (flush, release) and fsync (durable) of an open file.
  void flush(OpenFile& file, bool durable);
  // truncate(2) to `size`; returns the new attributes.
  Attr truncate(uint64_t ino, uint64_t size);
  std::string readlink(uint64_t ino);
  FsStats statfs();

  // ---- What the kernel may keep, how a read may be answered (vfs/kernel_policy.h) ----
  // The lifetime of a negative entry for a name missing in `parent` (0 when `parent` is gone).
  double negative_entry_ttl(uint64_t parent, const CacheTimeouts& mount);
  // Whether the listing of directory `dir` may stay cached from one open to the next.
  bool keep_listing(uint64_t dir);
  bool may_splice(const ReplyMeans& means, size_t size) const;
  bool may_push(const ReplyMeans& means, size_t asked, size_t got) const;

  // Counts an error reply (for stats.json); the adapter calls it once per failed request.
  void note_error(int err);
  // The content of .h5direct/stats.json and of .h5direct/metrics (Prometheus text exposition
  // format), both from one snapshot of the same counters (counters()).
  std::string render_stats();
  std::string render_metrics();

  // One counter or gauge as both files show it: its place in stats.json (keys separated by
  // '.'), its metric name (without the h5direct_ prefix; counters end in _total) and help.
  struct Counter {
    std::vector<std::string> json_path;
    std::string metric;
    std::string help;
    bool is_counter = true;  // false: a gauge
    double value = 0;
    bool integral = true;  // shown as an integer
    std::string label_name, label_value;  // a labelled sample of a family (errors by errno)
  };
  // Every counter now, in one pass: what both files render.
  std::vector<Counter> counters();

  const std::string& source() const { return source_; }
  Engine& engine() { return engine_; }
  H5Files& files() { return files_; }

 private:
  NodePtr node(uint64_t ino);  // Error(ENOENT) when unknown
  // The path of a node looked up before, in the mount (for messages naming a reader's file).
  std::string path_of(uint64_t ino);
  const Caller* deciding(const Caller* who) const;  // nullptr when the daemon does not check
  Attr attr_of(const Node& n);

  Engine& engine_;
  H5Files& files_;
  std::string source_;
  std::unique_ptr<TreeContext> ctx_;
  std::unique_ptr<InodeTable> table_;
  std::unique_ptr<ReadReply::Shared> reply_shared_;  // reads in flight, push buffers
  std::mutex err_mu_;  // lock level 5 (docs/architecture.md), a leaf; guards errors_
  std::map<int, uint64_t> errors_;  // errno -> replies
  std::atomic<uint64_t> opens_{0};
  std::mutex names_mu_;  // lock level 5 (docs/architecture.md), a leaf; guards names_, warned_unheld_
  std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> names_;  // ino -> parent, name
  std::unordered_set<uint64_t> warned_unheld_;  // files whose unheld sources were warned of
};

}  // namespace h5d::vfs
