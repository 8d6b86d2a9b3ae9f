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

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"
#include "vfs/npy.h"
#include "vfs/sidecar.h"
#include "vfs/tree.h"

namespace h5d::vfs {
namespace {

constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

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

  std::vector<ChildEntry> list() override {
    DIR* d = ::opendir(path_.c_str());
    if (!d) fail(errno, "cannot list directory " + path_ + ": " + std::strerror(errno));
    if (!chain_) {
      struct stat self;
      if (::fstat(::dirfd(d), &self) == 0) chain_ = chain_with(nullptr, self);
    }
    std::vector<ChildEntry> out;
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
                      std::to_string(out.size()) + " shown so far");
            last = now;
          }
        }
        std::string path = join(path_, name);
        auto left_out = [&](log::Level level, const std::string& why) {
          log::write(level, "left out " + path + ": " + why);
        };
        if (is_under(path, ctx_.opts.exclude_path)) {
          left_out(log::Level::Warn, "it is the mount point");
          continue;
        }
        struct stat st;
        if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno != ENOENT) left_out(log::Level::Warn, std::string("cannot stat it: ") + std::strerror(errno));
          continue;  // ENOENT: it vanished since readdir
        }
        std::string real = path;
        if (S_ISLNK(st.st_mode)) {
          std::string why;
          real = resolve_link(path, ctx_.opts.exclude_path, why);
          if (real.empty() || ::stat(real.c_str(), &st) != 0) {
            left_out(log::Level::Info, why.empty() ? std::string("dangling symlink (") + std::strerror(errno) + ")" : why);
            continue;
          }
        }
        if (S_ISDIR(st.st_mode) && chain_has(chain_.get(), st)) {
          // Listing it would list this directory again, without end (ln -s . self): memory
          // would grow with every level a reader walks down.
          left_out(log::Level::Warn, "symlink loop: it leads to " + real + ", a directory it lies in (device " +
                                         std::to_string(st.st_dev) + ", inode " + std::to_string(st.st_ino) + ")");
          continue;
        }
        if (S_ISDIR(st.st_mode)) {
          // A symlinked directory is listed by its resolved path, so that the mount point's
          // exclusion holds below it too.
          out.push_back({name, make_source_dir_node(ctx_, real, st, chain_)});
        } else if (S_ISREG(st.st_mode)) {
          const int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            left_out(errno == EACCES || errno == EPERM ? log::Level::Warn : log::Level::Info,
                     std::string("the daemon cannot open it (") + std::strerror(errno) + ")");
            continue;
          }
          const int sig = hdf5_signature(fd, static_cast<uint64_t>(st.st_size));
          ::close(fd);
          if (sig == 1) {
            // By its resolved path: what the requesting user must be able to reach
            // (check_access) and what the daemon opens are the same file.
            out.push_back({name, make_hdf5_file_node(ctx_, real, st)});
          } else if (sig == 0) {
            left_out(log::Level::Info, "not an HDF5 file (no HDF5 signature)");
          } else {
            left_out(log::Level::Warn, std::string("unreadable (") + std::strerror(-sig) + ")");
          }
        } else {
          left_out(log::Level::Info, "neither a regular file nor a directory");
        }
      }
    } catch (...) {
      ::closedir(d);
      throw;
    }
    ::closedir(d);
    return out;
  }

 private:
  const TreeContext& ctx_;
  std::string path_;
  DirChainPtr chain_;  // path_ and the directories it is shown below
};

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
    std::shared_ptr<H5File> f = ctx_.engine.open_file(file_);
    std::vector<LinkEntry> members = f->list_group(group_);
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
    std::vector<ChildEntry> out;
    std::set<std::string> taken;
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
    // The group's (the file's, at the root) attributes: .attrs.json, rendered at its first open
    // (listing reads no attribute values). Its name is claimed before datasets': a dataset named
    // ".attrs" is shown as .attrs~ds.*; a member group named ".attrs.json" keeps its name.
    if (!taken.count(kGroupAttrsName)) {
      taken.insert(kGroupAttrsName);
      Engine* engine = &ctx_.engine;
      const std::string file = file_, group = group_;
      out.push_back({kGroupAttrsName, make_lazy_text_file(
                                          [engine, file, group] {
                                            auto attrs = engine->open_file(file)->attributes(group);
                                            return json_text(group_attrs_sidecar(file, group, attrs));
                                          },
                                          fmeta_)});
    } else {
      log::warn(file_ + ":" + group_ + ": its attributes are not shown: a member group is named " +
                kGroupAttrsName);
    }
    // Datasets whose natural names are free claim them first; the others try NAME~ds.
    std::vector<const LinkEntry*> renamed;
    std::vector<std::pair<const LinkEntry*, std::string>> datasets;
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
    // The datasets' metadata in one HDF5 helper request (per helper), not one each: a group of
    // 200 datasets took 201 requests to list. A hint only: what it could not answer, each
    // dataset's own request asks again and reports.
    std::vector<std::pair<std::string, std::string>> items;
    for (const auto& [m, stem] : datasets) items.emplace_back(file_, join(group_, m->name));
    H5File::prefetch_infos(ctx_.engine, items);
    for (const auto& [m, stem] : datasets) {
      add_dataset_files(ctx_, out, *f, join(group_, m->name), stem, fmeta_);
    }
    return out;
  }

 private:
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

int hdf5_signature(int fd, uint64_t file_size) {
  char buf[8];
  for (uint64_t off = 0; off + sizeof buf <= file_size; off = off ? off * 2 : 512) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(off));
    if (n < 0) return -errno;
    if (n != static_cast<ssize_t>(sizeof buf)) return 0;
    if (std::memcmp(buf, kSignature, sizeof buf) == 0) return 1;
  }
  return 0;
}

bool is_hdf5_file(int fd, uint64_t file_size) { return hdf5_signature(fd, file_size) == 1; }

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
  return std::make_shared<DirNode>(source_meta(path, st, MetaRule::Dir),
                                   make_source_dir_provider(ctx, path, st, std::move(up)));
}

NodePtr make_hdf5_file_node(const TreeContext& ctx, const std::string& path, const struct stat& st) {
  return std::make_shared<DirNode>(source_meta(path, st, MetaRule::DirOfFile),
                                   make_hdf5_file_provider(ctx, path, st));
}

NodePtr make_group_node(const TreeContext& ctx, const std::string& file_path,
                        const std::string& group_path, const NodeMeta& dir_meta,
                        const NodeMeta& file_meta) {
  return std::make_shared<DirNode>(
      dir_meta, make_group_provider(ctx, file_path, group_path, dir_meta, file_meta));
}

void add_dataset_files(const TreeContext& ctx, std::vector<ChildEntry>& out, H5File& file,
                       const std::string& dset_path, const std::string& name, const NodeMeta& meta) {
  const std::string fpath = file.path();
  const std::string what = fpath + ":" + dset_path;
  Engine* engine = &ctx.engine;
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
    spec.loader = [engine, fpath, dset_path] {
      return engine->open_file(fpath)->dataset_array(dset_path);
    };
    spec.file = fpath;
    spec.dset = dset_path;
    npy_offset = npy_header(info->dtype, info->shape).size();
    out.push_back({name + ".npy", make_array_file(ctx, ArrayFormat::Npy, spec, dmeta)});
    out.push_back({name + ".raw", make_array_file(ctx, ArrayFormat::Raw, std::move(spec), dmeta)});
  }
  out.push_back({name + ".json", make_lazy_text_file(
                                     [engine, fpath, dset_path, npy_offset] {
                                       auto i = engine->open_file(fpath)->dataset_details(dset_path);
                                       return json_text(dataset_sidecar(*i, npy_offset));
                                     },
                                     dmeta)});
}

}  // namespace h5d::vfs
