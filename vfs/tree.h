// The virtual tree: nodes (directories, files, symlinks), the lazy directory providers that
// fill directories on first use, and the inode table. Knows nothing of FUSE.
//
// Extending the tree (EuXFEL run view and friends): write a DirProvider and a ProviderFactory
// that recognises the directories (or HDF5 files) it wants to present, and register it with
// Vfs::add_provider_factory (see vfs/providers.cpp: install_builtin_providers). Factories are
// tried, in registration order, before the plain directory / HDF5 group providers, every time a
// directory node is created for a real directory or an HDF5 file; the first that returns a
// provider wins. The helpers at the end of this file build the standard nodes (real directories,
// HDF5 groups, dataset files, array files), so a provider can mix its own nodes with plain ones.
//
// Threading: nodes are shared between FUSE worker threads. A DirNode lists its provider once
// (under its own mutex, never a global one); after that, its listing is immutable, except that
// a revalidated directory (DirProvider::revalidate_seconds) may replace it with a new one, which
// readers pick up at their next access (they keep the shared_ptr they hold). File nodes are
// immutable after construction except for lazily computed, mutex-guarded caches.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/array/array.h"
#include "vfs/vfs_options.h"
#include "vfs/read_policy.h"

struct stat;

namespace h5d {
class Engine;
class H5Files;
class H5File;
struct DatasetInfo;
class Writer;
}  // namespace h5d

namespace h5d::vfs {

struct ArraySpec;

enum class NodeKind { Directory, File, Symlink };

// How a node's permission bits follow its source object's mode: a file shown for a source file
// (its r bits; Writable: r and w), a directory shown for a source file (r-x where the file has
// r; Writable: and its w bits), a directory shown for a source directory (r and x bits;
// Writable: and w), or Fixed (set once, never re-derived).
enum class MetaRule { Fixed, File, FileWritable, DirOfFile, DirOfFileWritable, Dir, DirWritable };
mode_t perm_by_rule(MetaRule rule, mode_t st_mode);

// Owner, permission bits (never write bits, unless on a rw mount) and times shown for a node.
struct NodeMeta {
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t perm = 0444;  // permission bits only; the type bits come from the node kind
  timespec mtime{};
  timespec ctime{};
  // The source file or directory (resolved, absolute) the node is shown for: its owner, mode
  // and times are re-read (current_meta) whenever the kernel asks for attributes, and the
  // requesting user must be able to reach it (check_access). Empty: nothing to follow.
  std::shared_ptr<const std::string> source;
  MetaRule rule = MetaRule::Fixed;
  // Other files the node's bytes come from (the file behind an external link, VDS sources;
  // resolved): the requesting user must be able to read each of them too.
  std::shared_ptr<const std::vector<std::string>> also;
  // Shown from a source that may change while mounted (an entry of a source directory, an HDF5
  // file, a run directory): the kernel keeps its name at most VfsOptions::revalidate seconds,
  // so that a node replaced by a new listing (vfs/tree.h, DirProvider::changed) is looked up
  // again even where no invalidation reached the kernel.
  bool live = false;
};

// Meta of a file shown for a source file (its r bits), of a directory shown for a source file
// (r-x where the file has r), and of a directory shown for a source directory (r and x bits).
// The forms with a path follow that source (NodeMeta::source).
NodeMeta file_meta(const struct stat& st);
NodeMeta dir_meta_of_file(const struct stat& st);
NodeMeta dir_meta(const struct stat& st);
NodeMeta source_meta(const std::string& path, const struct stat& st, MetaRule rule);
// A fixed permission (the source, if any, is still followed for owner, times and access).
NodeMeta with_perm(NodeMeta m, mode_t perm);
// `m` whose bytes also come from `paths` (an external link's file, VDS sources, a run's sequence
// files): each is resolved (realpath) and added to NodeMeta::also unless it is m's own source.
NodeMeta with_also(NodeMeta m, const std::vector<std::string>& paths);
// `m` with owner, times and (unless Fixed) permission bits as the source has them now (one
// stat); `m` itself when it follows no source or the source cannot be stat'ed.
NodeMeta current_meta(const NodeMeta& m);

// Who sent a request: the kernel's permission rules (owner bits for the owner, else group bits
// for a member of the group, else other bits; uid 0 passes) applied by the daemon itself.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  bool in_group(gid_t g) const;
};
// The supplementary groups of thread `tid` (a FUSE request's pid), from /proc/TID/task/TID/status
// ("Groups:" line), read whole and NUL-terminated: libfuse 3.14's fuse_req_getgroups parses an
// unterminated buffer (strstr past the read bytes, caught by ASan), so it is not used. False
// when the thread is gone or /proc cannot be read.
bool thread_groups(long tid, std::vector<gid_t>& out);
// The "Groups:" line of a /proc status text; false when there is none or it is malformed.
bool parse_status_groups(const std::string& status, std::vector<gid_t>& out);
// True when `c` may do `want` (R_OK, W_OK, X_OK bits) on an object with this owner and mode.
bool permits(const Caller& c, uid_t uid, gid_t gid, mode_t mode, int want);
// Error(EACCES) unless `c` could reach the node's source as it would meet it directly: search
// (x) on every directory of its resolved path, from "/"; then read on the source itself when it
// is a regular file (everything shown for a file derives from its r bits) and `want_dir` on it
// when it is a directory; the same for each file in NodeMeta::also. Nodes that follow no
// source pass.
void check_access(const Caller& c, const NodeMeta& m, int want_dir);
// Error(EACCES) unless `c` could reach the node's source and each file in NodeMeta::also (search
// on every directory of their resolved paths, as stat(2) needs), whatever their own modes: what a
// directory node's attributes need (vfs::Vfs::lookup).
void check_reach(const Caller& c, const NodeMeta& m);

class Node {
 public:
  Node(NodeKind kind, NodeMeta meta) : kind_(kind), meta_(meta) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  NodeKind kind() const { return kind_; }
  // As listed; current_meta(meta()) follows the source.
  const NodeMeta& meta() const { return meta_; }
  // 0 until the node is registered in the inode table (when its parent is listed).
  uint64_t ino() const { return ino_.load(std::memory_order_acquire); }
  // Size as stat reports it. May compute lazily; may throw h5d::Error.
  virtual uint64_t size() const { return 0; }

 private:
  friend class InodeTable;
  const NodeKind kind_;
  const NodeMeta meta_;
  std::atomic<uint64_t> ino_{0};
};
using NodePtr = std::shared_ptr<Node>;

// One open file: what a FUSE file handle points to. read() may be called concurrently from
// several threads for the same OpenFile.
class OpenFile {
 public:
  OpenFile() { live_.fetch_add(1, std::memory_order_relaxed); }
  OpenFile(const OpenFile&) = delete;  // one per FUSE file handle; never copied
  OpenFile& operator=(const OpenFile&) = delete;
  virtual ~OpenFile() { live_.fetch_sub(1, std::memory_order_relaxed); }
  // How many OpenFiles exist: the files open (or mapped: a mapping keeps its file open) through
  // the mount. Async-signal-safe (a lock-free atomic load).
  static int64_t live() { return live_.load(std::memory_order_relaxed); }
  // Reads up to `size` bytes at `off` into buf; returns the count (short only at end of file).
  virtual size_t read(uint64_t off, size_t size, char* buf) = 0;
  // What a read makes worth pushing into the page cache (vfs/read_policy.h), before the reply:
  // file ranges of the rest of the units the read decoded, and of a stream's decoded units
  // ahead. The FUSE adapter pushes them (notify_store).
  using Range = ByteRange;
  struct Pushes {
    Range ranges[3];  // the read's units on both sides of it, then a stream's units ahead
  };
  // read(), also filling `pushes`. Default: nothing to push.
  virtual size_t read_pushing(uint64_t off, size_t size, char* buf, Pushes& pushes) {
    (void)pushes;
    return read(off, size, buf);
  }
  // A read whose bytes are `head` (in memory owned by the file's node) then file runs stored
  // verbatim in source files (Array::file_runs): the FUSE adapter splices those into the reply
  // instead of copying them through the daemon.
  struct Spliced {
    const char* head = nullptr;
    size_t head_len = 0;
    std::vector<FileRun> runs;
    size_t size() const {
      size_t n = head_len;
      for (const FileRun& r : runs) n += static_cast<size_t>(r.n);
      return n;
    }
  };
  // Fills `out` and returns true when the whole read (or what the file holds of it) can be
  // served so, in at most `max_buffers` buffers (header and runs: what the reply's pipe holds),
  // with the same follow-up as read_pushing (stream, decode-ahead); false: read it.
  virtual bool read_spliced(uint64_t off, size_t size, size_t max_buffers, Spliced& out) {
    (void)off;
    (void)size;
    (void)max_buffers;
    (void)out;
    return false;
  }
  // read() for such a push: the same bytes, but not counted as the reader's progress (no
  // stream or prefetch decisions).
  virtual size_t read_for_push(uint64_t off, size_t size, char* buf) { return read(off, size, buf); }
  // The read-ahead the kernel should use for this file (ReadPolicy::choose_readahead_kb), given
  // the mount's and whether pushes are on; asked at open where the daemon sets read-ahead per
  // file. 0 (the default: sidecars, small text files): no preference, the open is answered with
  // whatever the mount has.
  virtual unsigned choose_readahead_kb(bool push, unsigned mount_kb) {
    (void)push;
    (void)mount_kb;
    return 0;
  }
  bool direct_io = false;  // only for files whose content changes (stats.json)
  bool keep_cache = true;  // files never change under a mount
  // The source files the file's bytes come from, and how many of them the bound on
  // descriptors (max_open_files) left unheld: the others are held open while this file is
  // open, and keep being read if they are deleted or replaced meanwhile (hold_sources).
  size_t source_files = 0, sources_unheld = 0;
  // Writable open files (rw mounts, vfs/writable.cpp). Defaults: Error(EBADF) / nothing to do.
  // write() returns the count written (always `size`); flush() runs on close (FUSE flush and
  // release) and fsync (durable: data reach the disk).
  virtual size_t write(uint64_t off, size_t size, const char* buf);
  virtual void flush(bool durable) { (void)durable; }

 private:
  static inline std::atomic<int64_t> live_{0};
};

class FileNode : public Node {
 public:
  explicit FileNode(NodeMeta meta) : Node(NodeKind::File, meta) {}
  virtual std::unique_ptr<OpenFile> open() = 0;
  // True when size and content change over time (attributes must not be cached).
  virtual bool is_volatile() const { return false; }
  // Opening for writing (rw mounts): Error(EROFS) unless the node is writable.
  virtual std::unique_ptr<OpenFile> open_write(int flags);
  // truncate(2)/ftruncate(2): Error(EROFS) unless the node is writable.
  virtual void truncate(uint64_t size);
  // The array behind NAME.npy / NAME.raw of an existing dataset (nullptr for other files).
  virtual const ArraySpec* array_spec() const { return nullptr; }
};

class SymlinkNode final : public Node {
 public:
  SymlinkNode(NodeMeta meta, std::string target)
      : Node(NodeKind::Symlink, meta), target_(std::move(target)) {}
  const std::string& target() const { return target_; }
  uint64_t size() const override { return target_.size(); }

 private:
  const std::string target_;
};

struct ChildEntry {
  std::string name;
  NodePtr node;
};

// Lists the children of one directory. list() is called on the first lookup or readdir of the
// directory (never at mount time) and its result is kept; when it throws (h5d::Error), the
// access fails and the next access calls it again. Names must not be empty, ".", ".." or contain
// '/'; duplicates are dropped (the first wins) with a warning.
//
// Sources that change while mounted (runs being written, datasets that grow): a provider whose
// revalidate_seconds() is > 0 is kept after the first listing, and a lookup or listing of its
// directory asks changed() at most once per that many seconds (one thread asks; the others use
// the listing they have). When it says true, list() is called again and its result replaces the
// listing: new nodes, new inode numbers, so the kernel drops what it cached of the old ones (their
// names are cached at most that long: NodeMeta::live), while files already open keep their old
// nodes and arrays. When that list() throws, the previous listing stays (logged).
//
// A provider that lists again may hand back the nodes of entries that did not change (the same
// NodePtr): those keep their inode numbers and whatever they have listed below them; only the
// names whose node differs (added, removed, replaced) count as changed (changed_names).
class DirProvider {
 public:
  virtual ~DirProvider() = default;
  virtual std::vector<ChildEntry> list() = 0;
  virtual double revalidate_seconds() const { return 0; }
  // Cheap (a few stat calls): whether the source changed since the last list().
  virtual bool changed() { return false; }
  // A child known without listing (nullptr: list() decides), asked by a lookup before the
  // directory was first listed, so that a path walk through it costs nothing when listing it
  // would (a detector's directory: its stacked keys need every module's files; its module
  // directories below need none). The node must be the one list() then gives that name.
  virtual NodePtr find_unlisted(const std::string& name) {
    (void)name;
    return nullptr;
  }
};

class InodeTable;

// Told which names of a directory changed when a revalidated directory was listed again: vfs
// decides what changed, the listener (the FUSE adapter) makes the kernel forget what it cached
// of those names and of the directory. Called with the directory's listing lock held (level 1):
// it must not block, take a lock below level 5 or call back into the tree (the adapter queues
// the names for a thread of its own).
class TreeListener {
 public:
  virtual ~TreeListener() = default;
  virtual void names_changed(uint64_t dir_ino, const std::vector<std::string>& names) = 0;
};

// Where new entries of a directory go on a rw mount (vfs/writable.cpp).
struct WriteTarget {
  enum Kind { None, SourceDir, NewGroup } kind = None;
  std::string path;   // SourceDir: the real directory; NewGroup: the HDF5 file
  std::string group;  // NewGroup: the group inside the file ("/" for the root)
};

class DirNode final : public Node {
 public:
  DirNode(NodeMeta meta, std::unique_ptr<DirProvider> provider)
      : Node(NodeKind::Directory, meta), provider_(std::move(provider)) {}
  // > 0: the listing is checked against its source at most once per this many seconds (known
  // once listed; 0 before).
  double revalidate_seconds() const { return interval_ns_.load(std::memory_order_acquire) * 1e-9; }

  struct Listing {
    std::vector<ChildEntry> entries;  // sorted by name
    std::unordered_map<std::string, size_t> index;
  };
  // Lists the provider on first use and registers the children's inodes. A revalidated
  // directory whose listing changed tells the table's listener which names did.
  std::shared_ptr<const Listing> listing(InodeTable& table);
  // The names whose node differs between two listings (added, removed, or shown for another
  // node), sorted.
  static std::vector<std::string> changed_names(const Listing& before, const Listing& after);
  // nullptr when there is no such child.
  NodePtr find(InodeTable& table, const std::string& name);
  // Adds a child after the listing (rw mounts: created entries). Error(EEXIST) when taken.
  void add_child(InodeTable& table, const std::string& name, NodePtr node);

  // Set once, before the node is shared.
  void set_write_target(WriteTarget t) { target_ = std::move(t); }
  const WriteTarget& write_target() const { return target_; }

 private:
  std::mutex list_mu_;  // lock level 1 (docs/architecture.md), before any core lock and mu_; serialises listing
  std::mutex mu_;       // lock level 5 (docs/architecture.md), a leaf after list_mu_; guards listing_
  std::unique_ptr<DirProvider> provider_;  // guarded by list_mu_
  std::shared_ptr<const Listing> listing_;
  std::atomic<int64_t> interval_ns_{0};  // the provider's revalidate_seconds(), set at first listing
  int64_t checked_ns_ = 0;  // guarded by mu_: steady clock of the last listing or check
  WriteTarget target_;
};

// Inode numbers: the root is 1 (FUSE_ROOT_ID); every other node gets the next number when it is
// first registered, and keeps it (and stays alive) for the mount's life.
class InodeTable {
 public:
  explicit InodeTable(NodePtr root);
  uint64_t add(const NodePtr& node);
  NodePtr get(uint64_t ino) const;  // nullptr when unknown
  size_t size() const;
  // Who is told about names that changed (TreeListener); set before the first access.
  void set_listener(TreeListener* l) { listener_ = l; }
  TreeListener* listener() const { return listener_; }

 private:
  TreeListener* listener_ = nullptr;
  mutable std::shared_mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards nodes_
  std::vector<NodePtr> nodes_;    // nodes_[ino - 1]
};

// ---- Extension points -------------------------------------------------------------------------

struct TreeContext;

enum class SourceKind { Directory, Hdf5File };

// The real directories a directory node is shown below, itself included (device and inode,
// innermost first): a symlink that resolves to one of them is a loop (ln -s . self, a -> b -> a)
// and is left out, so that the tree stays finite.
struct DirChain {
  dev_t dev;
  ino_t ino;
  std::shared_ptr<const DirChain> up;
};
using DirChainPtr = std::shared_ptr<const DirChain>;
DirChainPtr chain_with(DirChainPtr up, const struct stat& st);
bool chain_has(const DirChain* c, const struct stat& st);

struct ProviderRequest {
  const TreeContext& ctx;
  std::string path;    // absolute path of the real directory or HDF5 file
  SourceKind kind;
  const struct stat& st;
  DirChainPtr chain;  // Directory: the directories above `path` (its own not included)
};
// Returns a provider for the directory node shown for `path`, or nullptr when not interested.
using ProviderFactory = std::function<std::unique_ptr<DirProvider>(const ProviderRequest&)>;

// The mount's read figures (stats.json, metrics: Vfs::counters), each counted once, here in vfs:
// where a data file's bytes are read or spliced (vfs/array_file.cpp) or pushed (ReadReply::push, vfs/read_reply.h).
// core counts what it does to serve them (Engine::stats: decodes, source requests, caches), not
// the reads themselves. Relaxed atomics: they are statistics, not state.
struct ReadCounters {
  // Reads of .npy/.raw data: each request answered (data bytes read, or spliced), and each copy
  // of pushed pages; the bytes they gave the kernel (data bytes read; a spliced reply's header
  // too, as it goes with the spliced bytes).
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> bytes_served{0};
  std::atomic<uint64_t> bytes_spliced{0};  // replied by splicing from source files
  std::atomic<uint64_t> splice_cold{0};    // reads not spliced: their source bytes were not cached
  std::atomic<uint64_t> splice_fragmented{0};  // reads not spliced: more runs than the pipe holds
  std::atomic<uint64_t> bytes_pushed{0};   // pushed into the page cache by the FUSE adapter
  // A spliced reply of `bytes`, `spliced` of them from source files.
  void note_spliced(uint64_t bytes, uint64_t spliced) {
    reads.fetch_add(1, std::memory_order_relaxed);
    bytes_served.fetch_add(bytes, std::memory_order_relaxed);
    bytes_spliced.fetch_add(spliced, std::memory_order_relaxed);
  }
};

// What every provider may use. Owned by the Vfs; outlives every node.
struct TreeContext {
  Engine& engine;
  H5Files& files;
  VfsOptions opts;
  std::vector<ProviderFactory> factories;  // set up before the first access, then read-only
  Writer* writer = nullptr;  // rw mounts only (set before the first access)
  mutable ReadCounters counters{};  // counted through the nodes' const context
};

// ---- Building blocks for providers (vfs/h5tree.cpp, vfs/nodes.cpp) ------------------------------

// True when `path` is `root` or lies under it (both absolute and resolved); false for an empty root.
bool is_under(const std::string& path, const std::string& root);

// True when `path` is a regular file with the HDF5 signature at 0, 512, 1024, 2048, ...
bool is_hdf5_file(const std::string& path);
bool is_hdf5_file(int fd, uint64_t file_size);

// The provider for a real directory / an HDF5 file: registered factories first, then the plain
// directory provider / the root group of the file. The *_node forms wrap it in a DirNode.
std::unique_ptr<DirProvider> make_source_dir_provider(const TreeContext& ctx,
                                                      const std::string& path,
                                                      const struct stat& st,
                                                      DirChainPtr up = nullptr);
std::unique_ptr<DirProvider> make_hdf5_file_provider(const TreeContext& ctx,
                                                     const std::string& path,
                                                     const struct stat& st);
// The plain providers, without consulting the factories.
// `chain`: the directories above `path` and `path` itself (nullptr: `path` alone).
std::unique_ptr<DirProvider> make_plain_dir_provider(const TreeContext& ctx, const std::string& path,
                                                     DirChainPtr chain = nullptr);
std::unique_ptr<DirProvider> make_group_provider(const TreeContext& ctx,
                                                 const std::string& file_path,
                                                 const std::string& group_path,
                                                 const NodeMeta& dir_meta,
                                                 const NodeMeta& file_meta);
NodePtr make_source_dir_node(const TreeContext& ctx, const std::string& path,
                             const struct stat& st, DirChainPtr up = nullptr);
NodePtr make_hdf5_file_node(const TreeContext& ctx, const std::string& path,
                            const struct stat& st);
// The directory node for group `group_path` of the HDF5 file at `file_path` (opened lazily, when
// the directory is listed). `meta` applies to everything below.
NodePtr make_group_node(const TreeContext& ctx, const std::string& file_path,
                        const std::string& group_path, const NodeMeta& dir_meta,
                        const NodeMeta& file_meta);

// The details (attribute values, small values: H5File::dataset_details) of the datasets of one
// listing, for their sidecars: the first sidecar rendered asks for its own and those of the next
// datasets not asked yet in one request (H5File::datasets_details, kBatch at most), so that a
// directory whose sidecars are stat'ed one after another (ls -l, tar) takes one request per
// kBatch datasets instead of one each.
class DetailsBatch {
 public:
  static constexpr size_t kBatch = 64;
  DetailsBatch(H5Files& files, std::string file, std::string group, std::vector<std::string> dsets);
  // `dset`'s details (fetched alone when a batch fails: its own error is then the one thrown).
  std::shared_ptr<const DatasetInfo> get(const std::string& dset);

 private:
  H5Files& files_;
  const std::string file_, group_;
  const std::vector<std::string> dsets_;  // in listing order
  std::unordered_map<std::string, size_t> pos_;
  // Lock level 1 (docs/architecture.md), after a TextFileNode's: held while a batch is fetched.
  std::mutex mu_;
  std::vector<char> asked_;  // guarded by mu_: asked already (in a batch, or alone)
  std::unordered_map<std::string, std::shared_ptr<const DatasetInfo>> got_;  // guarded by mu_: not taken yet
};

// Adds the files of one dataset (NAME.npy, NAME.raw, NAME.json; only NAME.json when it is not an
// array) to `out`. Reads the dataset's metadata now; its sidecar's details when it is first
// stat'ed or opened, through `batch` when given.
void add_dataset_files(const TreeContext& ctx, std::vector<ChildEntry>& out, H5File& file,
                       const std::string& dset_path, const std::string& name,
                       const NodeMeta& meta, std::shared_ptr<DetailsBatch> batch = nullptr);

// A lazily obtained array (opening files only when the node is opened).
using ArrayLoader = std::function<ArrayPtr()>;
enum class ArrayFormat { Npy, Raw };

struct ArraySpec {
  Shape shape;
  DType dtype;
  std::string what;       // for logs: "file.h5:/path"
  std::string read_path;  // "direct" or "library: <why>", logged per read with -o debug
  ArrayLoader loader;
  std::string file, dset;  // the HDF5 file and dataset when the array is one dataset (writes)
};
NodePtr make_array_file(const TreeContext& ctx, ArrayFormat format, ArraySpec spec,
                        const NodeMeta& meta);
// A read-only text file whose content is rendered once, at its first stat (lookup, getattr) or
// open, never at listing (readdir needs no sizes): its size is always the size of the bytes a
// read returns, and both stay as rendered for the node's life (a changed source is listed
// again, with new nodes). A rendering that fails fails that stat or open (and is tried again
// at the next).
NodePtr make_text_file(std::function<std::string()> render, const NodeMeta& meta);
// A read-only file whose content is rendered at each open (and each stat); served with direct_io.
NodePtr make_dynamic_file(std::function<std::string()> render, const NodeMeta& meta);
NodePtr make_dir_node(const NodeMeta& meta, std::vector<ChildEntry> fixed_children);

// Names for the files of a dataset within one directory (see docs/usage.md, "Names"): groups,
// links to groups and other directories keep their names; a dataset NAME gives NAME.npy,
// NAME.raw, NAME.json; when one of those is already taken by a directory, the dataset's files
// are named NAME~ds.npy, NAME~ds.raw, NAME~ds.json instead; when those are taken too, the
// dataset is left out (with a warning).
std::string dataset_stem(const std::string& name,
                         const std::function<bool(const std::string&)>& taken);

}  // namespace h5d::vfs
