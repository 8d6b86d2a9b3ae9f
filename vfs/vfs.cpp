#include "vfs/vfs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/log.h"
#include "core/write/writer.h"
#include "vfs/sidecar.h"
#include "vfs/writable.h"

namespace h5d::vfs {
namespace {

// The root: the source's own listing plus the control directory (.h5direct), which hides an
// entry of the same name in the source.
class RootProvider final : public DirProvider {
 public:
  RootProvider(const TreeContext& ctx, std::string path, struct stat st, NodePtr control)
      : ctx_(ctx), path_(std::move(path)), st_(st), control_(std::move(control)) {}

  std::vector<ChildEntry> list() override {
    if (!inner_) {
      inner_ = S_ISDIR(st_.st_mode) ? make_source_dir_provider(ctx_, path_, st_)
                                    : make_hdf5_file_provider(ctx_, path_, st_);
    }
    std::vector<ChildEntry> out;
    for (auto& c : inner_->list()) {
      if (c.name == Vfs::kControlDir) {
        log::warn(path_ + ": '" + c.name + "' is hidden by h5direct's control directory");
        continue;
      }
      out.push_back(std::move(c));
    }
    out.push_back({Vfs::kControlDir, control_});
    return out;
  }
  // A run or an HDF5 file as the mount's source changes like one below it.
  double revalidate_seconds() const override { return inner_ ? inner_->revalidate_seconds() : 0; }
  bool changed() override { return inner_ && inner_->changed(); }

 private:
  const TreeContext& ctx_;
  std::string path_;
  struct stat st_;
  NodePtr control_;
  std::unique_ptr<DirProvider> inner_;  // made at the first listing (factories are set by then)
};

std::string oct(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m));
  return b;
}

}  // namespace

Vfs::Vfs(Engine& engine, H5Files& files, VfsOptions opts, const std::string& source)
    : engine_(engine), files_(files) {
  char resolved[PATH_MAX];
  if (!::realpath(source.c_str(), resolved)) {
    fail(errno, "source " + source + ": " + std::strerror(errno));
  }
  source_ = resolved;
  struct stat st;
  if (::stat(source_.c_str(), &st) != 0) {
    fail(errno, "source " + source + ": " + std::strerror(errno));
  }
  NodeMeta root_meta;
  if (S_ISDIR(st.st_mode)) {
    // rw: mkdir NAME.h5 at the root
    root_meta = source_meta(source_, st, opts.writable ? MetaRule::DirWritable : MetaRule::Dir);
  } else if (S_ISREG(st.st_mode)) {
    if (!is_hdf5_file(source_)) {
      fail(EINVAL, "source " + source + " is not an HDF5 file (no HDF5 signature) nor a directory");
    }
    root_meta = source_meta(source_, st, MetaRule::DirOfFile);
  } else {
    fail(EINVAL, "source " + source + " is neither a regular file nor a directory");
  }
  // The excluded path is compared with paths resolved from the real source path: the same
  // spelling without "." and ".." (lexically: stat'ing it could reach this very mount).
  if (!opts.exclude_path.empty()) {
    std::string ex = std::filesystem::path(opts.exclude_path).lexically_normal().string();
    while (ex.size() > 1 && ex.back() == '/') ex.pop_back();
    opts.exclude_path = ex;
  }
  ctx_.reset(new TreeContext{engine, files, opts, {}});
  reply_shared_ = std::make_unique<ReadReply::Shared>();
  reply_shared_->bytes_pushed = &ctx_->counters.bytes_pushed;
  NodeMeta ctl = with_perm(root_meta, 0555);
  const NodeMeta ctl_file = with_perm(root_meta, 0444);
  NodePtr control = make_dir_node(ctl, {{"stats.json", make_dynamic_file([this] { return render_stats(); }, ctl_file)},
                                        {"metrics", make_dynamic_file([this] { return render_metrics(); }, ctl_file)},
                                        {"log", make_dynamic_file([] { return log::recent_text(); }, ctl_file)}});
  auto root = std::make_shared<DirNode>(
      root_meta, std::make_unique<RootProvider>(*ctx_, source_, st, control));
  table_ = std::make_unique<InodeTable>(root);
}

Vfs::~Vfs() = default;

void Vfs::add_provider_factory(ProviderFactory factory) {
  ctx_->factories.push_back(std::move(factory));
}

void Vfs::set_listener(TreeListener* listener) { table_->set_listener(listener); }

NodePtr Vfs::node(uint64_t ino) {
  NodePtr n = table_->get(ino);
  if (!n) fail(ENOENT, "unknown inode " + std::to_string(ino));
  return n;
}

Attr Vfs::attr_of(const Node& n) {
  Attr a;
  a.ino = n.ino();
  a.kind = n.kind();
  const NodeMeta m = current_meta(n.meta());  // as the source is now (chmod, chown)
  a.uid = m.uid;
  a.gid = m.gid;
  a.mtime = m.mtime;
  a.ctime = m.ctime;
  switch (n.kind()) {
    case NodeKind::Directory:
      a.mode = S_IFDIR | m.perm;
      a.nlink = 2;
      break;
    case NodeKind::File:
      a.mode = S_IFREG | m.perm;
      a.is_volatile = static_cast<const FileNode&>(n).is_volatile();
      break;
    case NodeKind::Symlink:
      a.mode = S_IFLNK | 0777;
      break;
  }
  a.size = n.size();
  a.blocks = a.kind == NodeKind::File && a.size > 0 ? 1 : 0;
  const VfsOptions& o = ctx_->opts;
  if (n.meta().live && o.revalidate > 0) a.cache_limit = o.revalidate;
  if (n.kind() == NodeKind::Directory) {
    const double r = static_cast<const DirNode&>(n).revalidate_seconds();
    if (r > 0) a.cache_limit = a.cache_limit < 0 ? r : std::min(a.cache_limit, r);
  }
  if (o.show_uid >= 0) a.uid = static_cast<uid_t>(o.show_uid);
  if (o.show_gid >= 0) a.gid = static_cast<gid_t>(o.show_gid);
  if (o.umask >= 0 && n.kind() != NodeKind::Symlink) {
    const mode_t full = n.kind() == NodeKind::Directory ? 0777 : 0666;
    const mode_t writable_bits = ctx_->writer ? 0777 : 0555;
    a.mode = (a.mode & S_IFMT) | (full & ~static_cast<mode_t>(o.umask) & writable_bits);
  }
  return a;
}

// uid=, gid=, umask= replace the source's owners and modes: what is shown is then what the
// kernel decides on (default_permissions), and the daemon adds no check of its own.
const Caller* Vfs::deciding(const Caller* who) const {
  const VfsOptions& o = ctx_->opts;
  return o.show_uid >= 0 || o.show_gid >= 0 || o.umask >= 0 ? nullptr : who;
}

Attr Vfs::getattr(uint64_t ino) { return attr_of(*node(ino)); }

Attr Vfs::lookup(uint64_t parent, const std::string& name, const Caller* who) {
  who = deciding(who);
  NodePtr p = node(parent);
  if (p->kind() != NodeKind::Directory) fail(ENOTDIR, "lookup in a non-directory");
  if (who) check_access(*who, p->meta(), X_OK);
  NodePtr c = static_cast<DirNode&>(*p).find(*table_, name);
  if (!c) fail(ENOENT, "no entry '" + name + "'");
  // As a file system shows the mode and owner of an entry to whoever may list its directory and
  // refuses only opening it: a directory node (an HDF5 file or group, a source directory) whose
  // source the user can reach is shown, even when they may not read it; listing it, and looking
  // up or opening anything below it, still need read (readdir, lookup, open). Its attributes say
  // nothing of its contents (size 0, the source's owner, mode and times). A file node's size is
  // its contents' (a .npy's shape, a sidecar's attributes): it needs read to be looked up.
  if (who) {
    if (c->kind() == NodeKind::Directory) {
      check_reach(*who, c->meta());
    } else {
      check_access(*who, c->meta(), 0);
    }
  }
  Attr a = attr_of(*c);
  {
    std::lock_guard<std::mutex> lk(names_mu_);
    names_.try_emplace(a.ino, parent, name);
  }
  return a;
}

std::string Vfs::path_of(uint64_t ino) {
  std::string path;
  std::lock_guard<std::mutex> lk(names_mu_);
  for (int depth = 0; ino != kRootIno && depth < 256; ++depth) {
    auto it = names_.find(ino);
    if (it == names_.end()) return "(inode " + std::to_string(ino) + ")" + path;
    path = "/" + it->second.second + path;
    ino = it->second.first;
  }
  return (ctx_->opts.exclude_path.empty() ? std::string(".") : ctx_->opts.exclude_path) + path;
}

std::vector<DirEntry> Vfs::readdir(uint64_t ino, const Caller* who) {
  who = deciding(who);
  NodePtr p = node(ino);
  if (p->kind() != NodeKind::Directory) fail(ENOTDIR, "readdir of a non-directory");
  if (who) check_access(*who, p->meta(), R_OK);
  auto l = static_cast<DirNode&>(*p).listing(*table_);
  std::vector<DirEntry> out;
  out.reserve(l->entries.size());
  for (const auto& c : l->entries) out.push_back({c.name, c.node->ino(), c.node->kind()});
  return out;
}

std::unique_ptr<OpenFile> Vfs::open(uint64_t ino, int flags, const Caller* who) {
  who = deciding(who);
  NodePtr n = node(ino);
  const bool for_write = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  if (for_write && !writable()) fail(EROFS, "read-only filesystem");
  if (n->kind() == NodeKind::Directory) fail(EISDIR, "is a directory");
  if (n->kind() != NodeKind::File) fail(EINVAL, "not a regular file");
  if (who) {
    // Decided on the source as it is now: a chmod or chown since the kernel cached the
    // attributes counts for every new open.
    check_access(*who, n->meta(), R_OK);
    const NodeMeta m = current_meta(n->meta());
    const int want = (for_write ? W_OK : 0) | ((flags & O_ACCMODE) == O_WRONLY ? 0 : R_OK);
    if (!permits(*who, m.uid, m.gid, m.perm, want)) {
      fail(EACCES, "uid " + std::to_string(who->uid) + " may not open this file (mode " + oct(m.perm) + ")");
    }
  }
  opens_.fetch_add(1, std::memory_order_relaxed);
  if (for_write) return static_cast<FileNode&>(*n).open_write(flags);
  std::unique_ptr<OpenFile> f = static_cast<FileNode&>(*n).open();
  if (f->sources_unheld > 0) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lk(names_mu_);
      first = warned_unheld_.insert(ino).second;
    }
    const size_t held = f->source_files - f->sources_unheld;
    const std::string msg = path_of(ino) + ": holds " + std::to_string(held) + " of its " +
                            std::to_string(f->source_files) + " source files open (max_open_files=" +
                            std::to_string(engine_.options().max_open_files) +
                            " bounds the files held for open readers): should one of the others be deleted or "
                            "replaced while it is open, reads of its bytes fail with ESTALE (a mapping: SIGBUS); "
                            "raise max_open_files to hold them all";
    if (first) log::warn(msg);
    else log::debug(msg);
  }
  return f;
}

void Vfs::set_writer(Writer* writer) {
  ctx_->writer = writer;
  ctx_->opts.writable = writer != nullptr;
  NodePtr root = table_->get(kRootIno);
  struct stat st;
  if (writer && ::stat(source_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    static_cast<DirNode&>(*root).set_write_target({WriteTarget::SourceDir, source_, ""});
  }
}

namespace {
NodeMeta new_meta(mode_t mode, uid_t uid, gid_t gid) {
  NodeMeta m;
  m.uid = uid;
  m.gid = gid;
  m.perm = mode & 07777;
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  m.mtime = m.ctime = now;
  return m;
}
}  // namespace

Attr Vfs::mkdir(uint64_t parent, const std::string& name, mode_t mode, uid_t uid, gid_t gid,
               const Caller* who) {
  if (!writable()) fail(EROFS, "read-only filesystem");
  NodePtr p = node(parent);
  if (p->kind() != NodeKind::Directory) fail(ENOTDIR, "mkdir in a non-directory");
  if ((who = deciding(who))) check_access(*who, p->meta(), X_OK | W_OK);
  NodePtr n = make_directory(*ctx_, *table_, static_cast<DirNode&>(*p), name, new_meta(mode, uid, gid));
  return attr_of(*n);
}

std::pair<Attr, std::unique_ptr<OpenFile>> Vfs::create(uint64_t parent, const std::string& name,
                                                       mode_t mode, uid_t uid, gid_t gid,
                                                       const Caller* who) {
  if (!writable()) fail(EROFS, "read-only filesystem");
  NodePtr p = node(parent);
  if (p->kind() != NodeKind::Directory) fail(ENOTDIR, "create in a non-directory");
  if ((who = deciding(who))) check_access(*who, p->meta(), X_OK | W_OK);
  auto r = create_file(*ctx_, *table_, std::static_pointer_cast<DirNode>(p), name,
                       new_meta(mode & 0777, uid, gid));
  opens_.fetch_add(1, std::memory_order_relaxed);
  return {attr_of(*r.first), std::move(r.second)};
}

size_t Vfs::write(OpenFile& file, uint64_t off, size_t size, const char* buf) {
  if (!writable()) fail(EROFS, "read-only filesystem");
  return file.write(off, size, buf);
}

void Vfs::flush(OpenFile& file, bool durable) { file.flush(durable); }

Attr Vfs::truncate(uint64_t ino, uint64_t size) {
  if (!writable()) fail(EROFS, "read-only filesystem");
  NodePtr n = node(ino);
  if (n->kind() == NodeKind::Directory) fail(EISDIR, "is a directory");
  if (n->kind() != NodeKind::File) fail(EINVAL, "not a regular file");
  static_cast<FileNode&>(*n).truncate(size);
  return attr_of(*n);
}

std::string Vfs::readlink(uint64_t ino) {
  NodePtr n = node(ino);
  if (n->kind() != NodeKind::Symlink) fail(EINVAL, "not a symbolic link");
  return static_cast<SymlinkNode&>(*n).target();
}

FsStats Vfs::statfs() {
  FsStats s;
  s.files = table_->size();
  return s;
}

void Vfs::note_error(int err) {
  std::lock_guard<std::mutex> lk(err_mu_);
  ++errors_[err];
}

}  // namespace h5d::vfs
