// The plain tree: real directories, HDF5 files recognised by their signature, their groups and
// the files of their datasets.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <set>
#include <unordered_map>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/fmt/chunk_index.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"
#include "vfs/npy.h"
#include "vfs/sidecar.h"
#include "vfs/tree.h"

namespace h5d::vfs {
namespace {


std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// realpath(3) of the symlink `path` that never looks up `avoid` or anything under it (the mount
// point: a lookup there would be a request to this daemon itself). Returns the resolved path, or
// "" with `why` set when the link reaches `avoid` or cannot be resolved.
std::string resolve_link(const std::string& path, const std::string& avoid, std::string& why) {
  std::vector<std::string> todo;  // components still to resolve, the next one last
  auto push_path = [&](const std::string& p) {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i <= p.size()) {
      const size_t j = std::min(p.find('/', i), p.size());
      if (j > i) parts.push_back(p.substr(i, j - i));
      i = j + 1;
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push_path(path);
  std::string cur;  // resolved so far ("" is the root)
  int links = 0;
  while (!todo.empty()) {
    const std::string c = todo.back();
    todo.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      cur.erase(cur.rfind('/') == std::string::npos ? 0 : cur.rfind('/'));
      continue;
    }
    const std::string next = cur + "/" + c;
    if (is_under(next, avoid)) {
      why = "it leads into the mount point " + avoid;
      return "";
    }
    struct stat st;
    if (::lstat(next.c_str(), &st) != 0) {
      why = std::string("dangling symlink (") + std::strerror(errno) + ")";
      return "";
    }
    if (!S_ISLNK(st.st_mode)) {
      cur = next;
      continue;
    }
    if (++links > 40) {
      why = "too many levels of symlinks";
      return "";
    }
    std::string target(PATH_MAX, '\0');
    const ssize_t n = ::readlink(next.c_str(), target.data(), target.size());
    if (n < 0) {
      why = std::string("unreadable symlink (") + std::strerror(errno) + ")";
      return "";
    }
    target.resize(static_cast<size_t>(n));
    if (!target.empty() && target[0] == '/') cur.clear();
    push_path(target);
  }
  return cur.empty() ? "/" : cur;
}

int64_t ns_of(const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

int64_t realtime_ns() {
  timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

// What a directory looked like, from one stat: a name added, removed or renamed in it changes
// its mtime and ctime; a directory replaced has another inode.
struct DirStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  static DirStamp of(const struct stat& st) {
    return {st.st_dev, st.st_ino, ns_of(st.st_mtim), ns_of(st.st_ctim)};
  }
  bool operator==(const DirStamp& o) const {
    return dev == o.dev && ino == o.ino && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
  bool operator!=(const DirStamp& o) const { return !(*this == o); }
};

// A directory's times come from the kernel's coarse clock (a few ms a tick): a change in the
// tick of the stat taken before a listing leaves the same times. A listing whose stamp is
// younger than this is made again at the next check.
constexpr int64_t kTickNs = 50'000'000;
// Regular files left out for lacking the HDF5 signature while young (modified within this
// long before a check: a file h5py is still writing has no superblock yet) are watched: each
// check stats them, and reads the signature again where they changed. Writing into a file does
// not change its directory's times.
constexpr int64_t kPendingNs = int64_t(600) * 1000000000;
constexpr size_t kPendingMax = 256;

// The relative symlink target from the directory of group `group` to that of `ancestor`, a
// group on its path ("/" or a prefix ending at a '/'; `group` itself gives "."): one ".." per
// level between them. "" when `ancestor` is not such a group.
std::string ancestor_target(const std::string& group, const std::string& ancestor) {
  auto depth = [](const std::string& p) {
    return p == "/" ? size_t(0) : static_cast<size_t>(std::count(p.begin(), p.end(), '/'));
  };
  const bool on_path = ancestor == "/" ||
                       (group.compare(0, ancestor.size(), ancestor) == 0 &&
                        (group.size() == ancestor.size() || group[ancestor.size()] == '/'));
  if (ancestor.empty() || ancestor[0] != '/' || !on_path || (ancestor.size() > 1 && ancestor.back() == '/'))
    return "";
  std::string out;
  for (size_t i = depth(ancestor); i < depth(group); ++i) out += out.empty() ? ".." : "/..";
  return out.empty() ? "." : out;
}

class PlainDirProvider final : public DirProvider {
 public:
  PlainDirProvider(const TreeContext& ctx, std::string path, DirChainPtr chain)
      : ctx_(ctx), path_(std::move(path)), chain_(std::move(chain)) {}

  // Names added, removed or replaced show at a lookup or listing (rw mounts: the writer adds
  // what it creates itself; listings are kept).
  double revalidate_seconds() const override { return ctx_.writer ? 0 : ctx_.opts.revalidate; }

  // One stat of the directory; and one of each young file that is not (yet) an HDF5 file.
  bool changed() override {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) return false;  // gone: its parent's listing drops it
    if (unsure_ || DirStamp::of(st) != stamp_) return true;
    const int64_t now = realtime_ns();
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      struct stat fst;
      if (::stat(p.path.c_str(), &fst) != 0 || !S_ISREG(fst.st_mode)) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));  // gone: the directory's times say so
        continue;
      }
      const FileIdentity id = identity_of(fst);
      if (id != p.id) {
        if (is_hdf5_file(p.path)) return true;
        p.id = id;
      }
      if (now - id.mtime_ns > kPendingNs) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
    return false;
  }

  std::vector<ChildEntry> list() override {
    DIR* d = ::opendir(path_.c_str());
    if (!d) fail(errno, "cannot list directory " + path_ + ": " + std::strerror(errno));
    Scan s;
    s.follow = revalidate_seconds() > 0;
    stamp(d, s.follow);
    s.listed_ns = s.follow ? realtime_ns() : 0;
    // A listing that takes long (thousands of files on a slow file system) says how far it got.
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    size_t seen = 0;
    try {
      const int dfd = ::dirfd(d);
      while (struct dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        if (++seen % 64 == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (now - last >= std::chrono::seconds(2)) {
            log::info("listing " + path_ + ": " + std::to_string(seen) + " entries looked at, " +
                      std::to_string(s.out.size()) + " shown so far");
            last = now;
          }
        }
        add_entry(s, dfd, name);
      }
    } catch (...) {
      ::closedir(d);
      throw;
    }
    ::closedir(d);
    if (s.follow) remember(s);
    return std::move(s.out);
  }

 private:
  struct Shown {
    std::string real;
    dev_t dev;
    ino_t ino;
    mode_t type;
    NodePtr node;
  };
  struct Pending {
    std::string path;
    FileIdentity id;
  };
  // One listing under way: what it shows and, when revalidated (`follow`), what it keeps for
  // the next check.
  struct Scan {
    bool follow = false;
    int64_t listed_ns = 0;
    std::vector<ChildEntry> out;
    std::unordered_map<std::string, Shown> shown;  // what this listing shows (revalidated only)
    std::vector<Pending> pending;
    std::set<std::string> left;  // the lines logged for entries left out (revalidated only)
  };

  // Takes the directory's stamp for changed() from d (and its chain, the first time).
  void stamp(DIR* d, bool follow) {
    struct stat self;
    if (::fstat(::dirfd(d), &self) == 0) {
      if (!chain_) chain_ = chain_with(nullptr, self);
      // Before reading: a change meanwhile is seen at the next check.
      stamp_ = DirStamp::of(self);
      unsure_ = follow && realtime_ns() - std::max(stamp_.mtime_ns, stamp_.ctime_ns) < kTickNs;
    }
  }

  // Logs that `path` is left out, and why.
  void left_out(Scan& s, const std::string& path, log::Level level, const std::string& why) {
    // Once per name and reason while it stays left out (a revalidated directory is listed again).
    const std::string line = "left out " + path + ": " + why;
    if (s.follow) {
      s.left.insert(line);
      if (left_.count(line)) return;
    }
    log::write(level, line);
  }

  // The node an entry had at the last listing, when it is still the same object: it keeps
  // its inode number and what it listed below it (a run stays open).
  NodePtr reuse(const Scan& s, const std::string& name, const std::string& real, const struct stat& st) const {
    if (!s.follow) return nullptr;
    auto it = shown_.find(name);
    if (it == shown_.end()) return nullptr;
    const Shown& sh = it->second;
    if (sh.real != real || sh.dev != st.st_dev || sh.ino != st.st_ino || sh.type != (st.st_mode & S_IFMT))
      return nullptr;
    return sh.node;
  }

  // Shows entry `name` as node n (remembered for the next check when revalidated).
  void show(Scan& s, const std::string& name, const std::string& real, const struct stat& st, NodePtr n) {
    if (s.follow) s.shown.emplace(name, Shown{real, st.st_dev, st.st_ino, st.st_mode & S_IFMT, n});
    s.out.push_back({name, std::move(n)});
  }

  // Adds entry `name` of the directory (dfd) to the listing, or logs why it is left out.
  void add_entry(Scan& s, int dfd, const std::string& name) {
    std::string path = join(path_, name);
    if (is_under(path, ctx_.opts.exclude_path)) {
      left_out(s, path, log::Level::Warn, "it is the mount point");
      return;
    }
    struct stat st;
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) left_out(s, path, log::Level::Warn, std::string("cannot stat it: ") + std::strerror(errno));
      return;  // ENOENT: it vanished since readdir
    }
    std::string real = path;
    if (S_ISLNK(st.st_mode)) {
      std::string why;
      real = resolve_link(path, ctx_.opts.exclude_path, why);
      if (real.empty() || ::stat(real.c_str(), &st) != 0) {
        left_out(s, path, log::Level::Info,
                 why.empty() ? std::string("dangling symlink (") + std::strerror(errno) + ")" : why);
        return;
      }
    }
    if (S_ISDIR(st.st_mode) && chain_has(chain_.get(), st)) {
      // Listing it would list this directory again, without end (ln -s . self): memory
      // would grow with every level a reader walks down.
      left_out(s, path, log::Level::Warn, "symlink loop: it leads to " + real + ", a directory it lies in (device " +
                                              std::to_string(st.st_dev) + ", inode " + std::to_string(st.st_ino) + ")");
      return;
    }
    if (NodePtr same = reuse(s, name, real, st)) {
      show(s, name, real, st, std::move(same));
    } else if (S_ISDIR(st.st_mode)) {
      // A symlinked directory is listed by its resolved path, so that the mount point's
      // exclusion holds below it too.
      show(s, name, real, st, make_source_dir_node(ctx_, real, st, chain_));
    } else if (S_ISREG(st.st_mode)) {
      add_file(s, name, path, real, st);
    } else {
      left_out(s, path, log::Level::Info, "neither a regular file nor a directory");
    }
  }

  // Adds regular file `name` (at `path`, resolved: `real`) when it has the HDF5 signature; else
  // logs why not (a young one is watched by changed()).
  void add_file(Scan& s, const std::string& name, const std::string& path, const std::string& real,
                const struct stat& st) {
    const int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      left_out(s, path, errno == EACCES || errno == EPERM ? log::Level::Warn : log::Level::Info,
               std::string("the daemon cannot open it (") + std::strerror(errno) + ")");
      return;
    }
    const int sig = fmt::hdf5_signature(fd, static_cast<uint64_t>(st.st_size));
    ::close(fd);
    if (sig == 1) {
      // By its resolved path: what the requesting user must be able to reach
      // (check_access) and what the daemon opens are the same file.
      show(s, name, real, st, make_hdf5_file_node(ctx_, real, st));
    } else if (sig == 0) {
      if (s.follow && s.listed_ns - ns_of(st.st_mtim) <= kPendingNs) s.pending.push_back({real, identity_of(st)});
      left_out(s, path, log::Level::Info, "not an HDF5 file (no HDF5 signature)");
    } else {
      left_out(s, path, log::Level::Warn, std::string("unreadable (") + std::strerror(-sig) + ")");
    }
  }

  // Keeps what a revalidated listing showed, watches and left out, for the next check.
  void remember(Scan& s) {
    shown_ = std::move(s.shown);
    if (s.pending.size() > kPendingMax) {  // the youngest
      std::nth_element(s.pending.begin(), s.pending.begin() + kPendingMax, s.pending.end(),
                       [](const Pending& a, const Pending& b) { return a.id.mtime_ns > b.id.mtime_ns; });
      s.pending.resize(kPendingMax);
    }
    pending_ = std::move(s.pending);
    left_ = std::move(s.left);
  }

  const TreeContext& ctx_;
  std::string path_;
  DirChainPtr chain_;  // path_ and the directories it is shown below
  // Revalidated directories only (revalidate_seconds() > 0), guarded by the DirNode's list_mu_:
  DirStamp stamp_;      // the directory at the last list()
  bool unsure_ = false;  // the stamp was taken in the tick of a change: list again at the next check
  std::unordered_map<std::string, Shown> shown_;  // name -> what the last list() showed
  std::vector<Pending> pending_;  // young files without the signature, watched by changed()
  std::set<std::string> left_;    // the left-out lines of the last list(), not logged again
};

// The provider of a source directory, chosen again when a directory that no factory wanted
// changed: `cp -r r0338 r0340` makes r0340 before its files, so it is first a plain directory,
// then a run. Used when directories are revalidated.
class ChosenDirProvider final : public DirProvider {
 public:
  ChosenDirProvider(const TreeContext& ctx, std::string path, const struct stat& st, DirChainPtr up)
      : ctx_(ctx), path_(std::move(path)), up_(std::move(up)) {
    inner_ = from_factories(st);
    if (!inner_) inner_ = make_plain_dir_provider(ctx_, path_, chain_with(up_, st));
    else plain_ = false;
  }
  std::vector<ChildEntry> list() override {
    struct stat st;
    if (plain_ && listed_ && ::stat(path_.c_str(), &st) == 0) {
      if (auto p = from_factories(st)) {
        log::info(path_ + ": changed on disk; shown by its own view now (a run directory)");
        inner_ = std::move(p);
        plain_ = false;
      }
    }
    listed_ = true;
    return inner_->list();
  }
  double revalidate_seconds() const override { return inner_->revalidate_seconds(); }
  bool changed() override { return inner_->changed(); }

 private:
  std::unique_ptr<DirProvider> from_factories(const struct stat& st) {
    for (const auto& f : ctx_.factories) {
      if (auto p = f(ProviderRequest{ctx_, path_, SourceKind::Directory, st, up_})) return p;
    }
    return nullptr;
  }
  const TreeContext& ctx_;
  std::string path_;
  DirChainPtr up_;
  std::unique_ptr<DirProvider> inner_;
  bool plain_ = true, listed_ = false;
};

bool follows_changes(const TreeContext& ctx) { return ctx.opts.revalidate > 0 && !ctx.writer; }

class GroupProvider final : public DirProvider {
 public:
  GroupProvider(const TreeContext& ctx, std::string file, std::string group, NodeMeta dmeta,
                NodeMeta fmeta)
      : ctx_(ctx), file_(std::move(file)), group_(std::move(group)), dmeta_(dmeta), fmeta_(fmeta) {
    dmeta_.live = fmeta_.live = revalidate_seconds() > 0;
  }

  // A file that changed (a dataset grew, one was added) is listed again: new opens see the new
  // shapes. rw mounts: the writer changes the files itself and keeps the listings (none).
  double revalidate_seconds() const override { return ctx_.writer ? 0 : ctx_.opts.revalidate; }
  bool changed() override {
    struct stat st;
    if (::stat(file_.c_str(), &st) != 0) return false;  // deleted: keep what was shown (ESTALE)
    return identity_of(st) != listed_;
  }

  std::vector<ChildEntry> list() override {
    struct stat st;
    if (::stat(file_.c_str(), &st) == 0) listed_ = identity_of(st);  // before reading: a change
                                                                     // meanwhile is seen next time
    std::shared_ptr<H5File> f = ctx_.files.open(file_);
    std::vector<LinkEntry> members = f->list_group(group_);
    leave_out_long_names(members);
    std::vector<ChildEntry> out;
    std::set<std::string> taken;
    add_groups(members, out, taken);
    add_attrs_file(out, taken);
    add_datasets(*f, dataset_stems(members, taken), out);
    return out;
  }

 private:
  using Stems = std::vector<std::pair<const LinkEntry*, std::string>>;  // a dataset, its file names' stem

  // Leaves out the members whose names are too long to list, each with a log line.
  void leave_out_long_names(std::vector<LinkEntry>& members) const {
    // Names too long to list (FUSE takes names beyond NAME_MAX, but a directory entry must fit a
    // 4 KiB readdir reply: 2048 bytes here, with ~ds.json for datasets): left out, each with a
    // log line, instead of cutting the rest of the listing short.
    constexpr size_t kFuseNameMax = 2048;
    members.erase(std::remove_if(members.begin(), members.end(),
                                 [&](const LinkEntry& m) {
                                   const size_t room = m.kind == ObjectKind::Dataset ? kFuseNameMax - 8 : kFuseNameMax;
                                   if (m.name.size() <= room) return false;
                                   log::warn(file_ + ":" + join(group_, m.name.substr(0, 40)) + "...: left out, its name (" +
                                             std::to_string(m.name.size()) + " bytes) is too long to list (2048)");
                                   return true;
                                 }),
                  members.end());
  }

  // The member groups: a directory each, or a symlink for a link back to a group above.
  void add_groups(const std::vector<LinkEntry>& members, std::vector<ChildEntry>& out, std::set<std::string>& taken) {
    for (const auto& m : members) {
      if (m.kind != ObjectKind::Group) continue;
      if (!m.ancestor.empty()) {
        // A link back to a group on the way here (tloop.h5's /g1/g1.1/g2.1 -> /g1): a relative
        // symbolic link up to that group's directory, as a file system shows such a loop (ls
        // shows it, find does not follow it, realpath leads to the group within the mount).
        const std::string up = ancestor_target(group_, m.ancestor);
        if (up.empty()) {
          log::warn(file_ + ":" + join(group_, m.name) + ": left out, said to lead back to " + m.ancestor +
                    ", which is not a group above it");
          continue;
        }
        out.push_back({m.name, std::make_shared<SymlinkNode>(with_perm(dmeta_, 0777), up)});
        taken.insert(m.name);
        continue;
      }
      // A group behind an external link: everything below it is read from that file as well.
      const std::vector<std::string> other = m.file.empty() ? std::vector<std::string>{} : std::vector<std::string>{m.file};
      out.push_back({m.name, make_group_node(ctx_, file_, join(group_, m.name), with_also(dmeta_, other),
                                             with_also(fmeta_, other))});
      taken.insert(m.name);
    }
  }

  // The group's attributes file (.attrs.json), unless a member group took its name.
  void add_attrs_file(std::vector<ChildEntry>& out, std::set<std::string>& taken) {
    // The group's (the file's, at the root) attributes: .attrs.json, rendered at its first open
    // (listing reads no attribute values). Its name is claimed before datasets': a dataset named
    // ".attrs" is shown as .attrs~ds.*; a member group named ".attrs.json" keeps its name.
    if (!taken.count(kGroupAttrsName)) {
      taken.insert(kGroupAttrsName);
      H5Files* files = &ctx_.files;
      const std::string file = file_, group = group_;
      out.push_back({kGroupAttrsName, make_text_file(
                                          [files, file, group] {
                                            auto attrs = files->open(file)->attributes(group);
                                            return json_text(group_attrs_sidecar(file, group, attrs));
                                          },
                                          fmeta_)});
    } else {
      log::warn(file_ + ":" + group_ + ": its attributes are not shown: a member group is named " +
                kGroupAttrsName);
    }
  }

  // The member datasets and the stem of their file names (their name, else NAME~ds); one whose
  // names are all taken is left out (logged).
  Stems dataset_stems(const std::vector<LinkEntry>& members, std::set<std::string>& taken) const {
    // Datasets whose natural names are free claim them first; the others try NAME~ds.
    std::vector<const LinkEntry*> renamed;
    Stems datasets;
    auto group_taken = [&](const std::string& n) { return taken.count(n) > 0; };
    for (const auto& m : members) {
      if (m.kind != ObjectKind::Dataset) continue;
      if (dataset_stem(m.name, group_taken) == m.name) {
        datasets.emplace_back(&m, m.name);
      } else {
        renamed.push_back(&m);
      }
    }
    for (const auto& [m, stem] : datasets) {
      for (const char* ext : {".npy", ".raw", ".json"}) taken.insert(stem + ext);
    }
    auto any_taken = [&](const std::string& n) { return taken.count(n) > 0; };
    for (const LinkEntry* m : renamed) {
      const std::string stem = dataset_stem(m->name, any_taken);
      if (stem.empty()) {
        log::warn(file_ + ":" + join(group_, m->name) +
                  ": left out, its file names are taken by groups of the same directory");
        continue;
      }
      log::info(file_ + ":" + join(group_, m->name) + ": shown as " + stem +
                ".* (its own names are taken by groups)");
      datasets.emplace_back(m, stem);
      for (const char* ext : {".npy", ".raw", ".json"}) taken.insert(stem + ext);
    }
    return datasets;
  }

  // The files of each dataset (.npy, .raw, .json), their metadata asked for all at once.
  void add_datasets(H5File& f, const Stems& datasets, std::vector<ChildEntry>& out) {
    // The datasets' metadata in one HDF5 helper request (per helper), not one each: a group of
    // 200 datasets took 201 requests to list. A hint only: what it could not answer, each
    // dataset's own request asks again and reports.
    std::vector<std::pair<std::string, std::string>> items;
    for (const auto& [m, stem] : datasets) items.emplace_back(file_, join(group_, m->name));
    ctx_.files.prefetch_infos(items);
    std::vector<std::string> paths;
    for (const auto& item : items) paths.push_back(item.second);
    auto batch = std::make_shared<DetailsBatch>(ctx_.files, file_, group_, std::move(paths));
    for (const auto& [m, stem] : datasets) {
      add_dataset_files(ctx_, out, f, join(group_, m->name), stem, fmeta_, batch);
    }
  }

  const TreeContext& ctx_;
  std::string file_, group_;
  NodeMeta dmeta_, fmeta_;
  FileIdentity listed_;  // the file as it was at the last list()
};

}  // namespace

bool is_under(const std::string& path, const std::string& root) {
  if (root.empty() || path.compare(0, root.size(), root) != 0) return false;
  return path.size() == root.size() || path[root.size()] == '/' || root == "/";
}

bool is_hdf5_file(int fd, uint64_t file_size) { return fmt::hdf5_signature(fd, file_size) == 1; }

bool is_hdf5_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && is_hdf5_file(fd, static_cast<uint64_t>(st.st_size));
  ::close(fd);
  return ok;
}

std::unique_ptr<DirProvider> make_plain_dir_provider(const TreeContext& ctx, const std::string& path,
                                                     DirChainPtr chain) {
  return std::make_unique<PlainDirProvider>(ctx, path, std::move(chain));
}

std::unique_ptr<DirProvider> make_group_provider(const TreeContext& ctx, const std::string& file_path,
                                                 const std::string& group_path,
                                                 const NodeMeta& dir_meta, const NodeMeta& file_meta) {
  return std::make_unique<GroupProvider>(ctx, file_path, group_path, dir_meta, file_meta);
}

std::unique_ptr<DirProvider> make_source_dir_provider(const TreeContext& ctx, const std::string& path,
                                                      const struct stat& st, DirChainPtr up) {
  if (follows_changes(ctx)) return std::make_unique<ChosenDirProvider>(ctx, path, st, std::move(up));
  for (const auto& f : ctx.factories) {
    if (auto p = f(ProviderRequest{ctx, path, SourceKind::Directory, st, up})) return p;
  }
  return make_plain_dir_provider(ctx, path, chain_with(std::move(up), st));
}

std::unique_ptr<DirProvider> make_hdf5_file_provider(const TreeContext& ctx, const std::string& path,
                                                     const struct stat& st) {
  for (const auto& f : ctx.factories) {
    if (auto p = f(ProviderRequest{ctx, path, SourceKind::Hdf5File, st, nullptr})) return p;
  }
  return make_group_provider(ctx, path, "/", source_meta(path, st, MetaRule::DirOfFile),
                             source_meta(path, st, MetaRule::File));
}

NodePtr make_source_dir_node(const TreeContext& ctx, const std::string& path, const struct stat& st,
                             DirChainPtr up) {
  if (ctx.writer) {  // rw mount: who may create files in the directory may mkdir NAME.h5 there
    auto n = std::make_shared<DirNode>(source_meta(path, st, MetaRule::DirWritable),
                                       make_source_dir_provider(ctx, path, st, std::move(up)));
    n->set_write_target({WriteTarget::SourceDir, path, ""});
    return n;
  }
  NodeMeta m = source_meta(path, st, MetaRule::Dir);
  m.live = follows_changes(ctx);  // its parent may drop or replace it
  return std::make_shared<DirNode>(m, make_source_dir_provider(ctx, path, st, std::move(up)));
}

NodePtr make_hdf5_file_node(const TreeContext& ctx, const std::string& path, const struct stat& st) {
  NodeMeta m = source_meta(path, st, MetaRule::DirOfFile);
  m.live = follows_changes(ctx);
  return std::make_shared<DirNode>(m, make_hdf5_file_provider(ctx, path, st));
}

NodePtr make_group_node(const TreeContext& ctx, const std::string& file_path,
                        const std::string& group_path, const NodeMeta& dir_meta,
                        const NodeMeta& file_meta) {
  return std::make_shared<DirNode>(
      dir_meta, make_group_provider(ctx, file_path, group_path, dir_meta, file_meta));
}

DetailsBatch::DetailsBatch(H5Files& files, std::string file, std::string group, std::vector<std::string> dsets)
    : files_(files), file_(std::move(file)), group_(std::move(group)), dsets_(std::move(dsets)),
      asked_(dsets_.size(), 0) {
  for (size_t i = 0; i < dsets_.size(); ++i) pos_.emplace(dsets_[i], i);
}

std::shared_ptr<const DatasetInfo> DetailsBatch::get(const std::string& dset) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = got_.find(dset);
  if (it != got_.end()) {
    auto info = std::move(it->second);
    got_.erase(it);
    return info;
  }
  auto p = pos_.find(dset);
  std::shared_ptr<H5File> f = files_.open(file_);
  if (p == pos_.end() || asked_[p->second]) return f->dataset_details(dset);  // asked before: alone
  // This one and the next not asked yet, in listing order (ls -l and tar stat in that order).
  std::vector<std::string> ask;
  for (size_t i = p->second; i < dsets_.size() && ask.size() < kBatch; ++i) {
    if (asked_[i]) continue;
    asked_[i] = 1;
    ask.push_back(dsets_[i]);
  }
  std::vector<std::shared_ptr<const DatasetInfo>> infos;
  try {
    infos = f->datasets_details(group_, ask);
  } catch (const std::exception& e) {
    // One of them failed: each is asked alone when its sidecar is rendered, and says why.
    log::debug(file_ + ":" + group_ + ": details of " + std::to_string(ask.size()) +
               " datasets in one request failed, asked one by one: " + e.what());
    return f->dataset_details(dset);
  }
  std::shared_ptr<const DatasetInfo> mine;
  for (size_t i = 0; i < ask.size() && i < infos.size(); ++i) {
    if (ask[i] == dset) mine = infos[i];
    else got_[ask[i]] = infos[i];
  }
  return mine ? mine : f->dataset_details(dset);
}

void add_dataset_files(const TreeContext& ctx, std::vector<ChildEntry>& out, H5File& file,
                       const std::string& dset_path, const std::string& name, const NodeMeta& meta,
                       std::shared_ptr<DetailsBatch> batch) {
  const std::string fpath = file.path();
  const std::string what = fpath + ":" + dset_path;
  H5Files* files = &ctx.files;
  std::shared_ptr<const DatasetInfo> info;
  try {
    info = file.dataset_info(dset_path);
  } catch (const std::exception& e) {
    // Unreadable metadata: show the sidecar alone, saying why, instead of failing the listing.
    if (!already_logged(e)) log::warn(what + ": " + e.what());
    nlohmann::json j = {{"sidecar_version", kSidecarVersion}, {"file", fpath},
                        {"path", dset_path}, {"is_array", false}, {"error", e.what()}};
    const std::string text = json_text(j);
    out.push_back({name + ".json", make_text_file([text] { return text; }, meta)});
    return;
  }
  // The bytes may come from other files (an external link to the dataset, VDS sources): who
  // opens the dataset's files must be able to read those as well.
  std::vector<std::string> others;  // the file itself is left out by with_also (meta.source)
  if (info->file != fpath) others.push_back(info->file);
  for (const VdsMapping& v : info->vds) {
    if (!v.resolved_file.empty()) others.push_back(v.resolved_file);
  }
  const NodeMeta dmeta = with_also(meta, others);
  uint64_t npy_offset = 0;
  if (info->is_array) {
    ArraySpec spec;
    spec.shape = info->shape;
    spec.dtype = info->dtype;
    spec.what = what;
    spec.read_path = info->read_path.empty() ? "direct" : info->read_path;
    spec.loader = [files, fpath, dset_path] {
      return files->open(fpath)->dataset_array(dset_path);
    };
    spec.file = fpath;
    spec.dset = dset_path;
    npy_offset = npy_header(info->dtype, info->shape).size();
    out.push_back({name + ".npy", make_array_file(ctx, ArrayFormat::Npy, spec, dmeta)});
    out.push_back({name + ".raw", make_array_file(ctx, ArrayFormat::Raw, std::move(spec), dmeta)});
  }
  out.push_back({name + ".json", make_text_file(
                                     [files, fpath, dset_path, npy_offset, batch] {
                                       auto i = batch ? batch->get(dset_path)
                                                      : files->open(fpath)->dataset_details(dset_path);
                                       return json_text(dataset_sidecar(*i, npy_offset));
                                     },
                                     dmeta)});
}

}  // namespace h5d::vfs
