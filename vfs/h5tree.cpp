// The plain tree: real directories, HDF5 files recognised by their signature, their groups and
// the files of their datasets.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/engine.h"
#include "core/error.h"
#include "core/h5file.h"
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

class PlainDirProvider final : public DirProvider {
 public:
  PlainDirProvider(const TreeContext& ctx, std::string path) : ctx_(ctx), path_(std::move(path)) {}

  std::vector<ChildEntry> list() override {
    DIR* d = ::opendir(path_.c_str());
    if (!d) fail(errno, "cannot list directory " + path_ + ": " + std::strerror(errno));
    std::vector<ChildEntry> out;
    try {
      const int dfd = ::dirfd(d);
      while (struct dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st;
        if (::fstatat(dfd, name.c_str(), &st, 0) != 0) continue;  // dangling symlink, vanished
        const std::string path = join(path_, name);
        if (S_ISDIR(st.st_mode)) {
          out.push_back({name, make_source_dir_node(ctx_, path, st)});
        } else if (S_ISREG(st.st_mode)) {
          const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) continue;  // unreadable to the daemon: nothing it could show
          const bool h5 = is_hdf5_file(fd, st.st_size);
          ::close(fd);
          if (h5) out.push_back({name, make_hdf5_file_node(ctx_, path, st)});
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
};

class GroupProvider final : public DirProvider {
 public:
  GroupProvider(const TreeContext& ctx, std::string file, std::string group, NodeMeta dmeta,
                NodeMeta fmeta)
      : ctx_(ctx), file_(std::move(file)), group_(std::move(group)), dmeta_(dmeta), fmeta_(fmeta) {}

  std::vector<ChildEntry> list() override {
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
      out.push_back({m.name, make_group_node(ctx_, file_, join(group_, m.name), dmeta_, fmeta_)});
      taken.insert(m.name);
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
    for (const auto& [m, stem] : datasets) {
      add_dataset_files(ctx_, out, *f, join(group_, m->name), stem, fmeta_);
    }
    return out;
  }

 private:
  const TreeContext& ctx_;
  std::string file_, group_;
  NodeMeta dmeta_, fmeta_;
};

}  // namespace

bool is_hdf5_file(int fd, uint64_t file_size) {
  char buf[8];
  for (uint64_t off = 0; off + sizeof buf <= file_size; off = off ? off * 2 : 512) {
    if (::pread(fd, buf, sizeof buf, static_cast<off_t>(off)) != static_cast<ssize_t>(sizeof buf)) {
      return false;
    }
    if (std::memcmp(buf, kSignature, sizeof buf) == 0) return true;
  }
  return false;
}

bool is_hdf5_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && is_hdf5_file(fd, st.st_size);
  ::close(fd);
  return ok;
}

std::unique_ptr<DirProvider> make_plain_dir_provider(const TreeContext& ctx, const std::string& path) {
  return std::make_unique<PlainDirProvider>(ctx, path);
}

std::unique_ptr<DirProvider> make_group_provider(const TreeContext& ctx, const std::string& file_path,
                                                 const std::string& group_path,
                                                 const NodeMeta& dir_meta, const NodeMeta& file_meta) {
  return std::make_unique<GroupProvider>(ctx, file_path, group_path, dir_meta, file_meta);
}

std::unique_ptr<DirProvider> make_source_dir_provider(const TreeContext& ctx, const std::string& path,
                                                      const struct stat& st) {
  for (const auto& f : ctx.factories) {
    if (auto p = f(ProviderRequest{ctx, path, SourceKind::Directory, st})) return p;
  }
  return make_plain_dir_provider(ctx, path);
}

std::unique_ptr<DirProvider> make_hdf5_file_provider(const TreeContext& ctx, const std::string& path,
                                                     const struct stat& st) {
  for (const auto& f : ctx.factories) {
    if (auto p = f(ProviderRequest{ctx, path, SourceKind::Hdf5File, st})) return p;
  }
  return make_group_provider(ctx, path, "/", dir_meta_of_file(st), file_meta(st));
}

NodePtr make_source_dir_node(const TreeContext& ctx, const std::string& path, const struct stat& st) {
  if (ctx.writer) {  // rw mount: who may create files in the directory may mkdir NAME.h5 there
    NodeMeta m = dir_meta(st);
    m.perm |= st.st_mode & 0222;
    auto n = std::make_shared<DirNode>(m, make_source_dir_provider(ctx, path, st));
    n->set_write_target({WriteTarget::SourceDir, path, ""});
    return n;
  }
  return std::make_shared<DirNode>(dir_meta(st), make_source_dir_provider(ctx, path, st));
}

NodePtr make_hdf5_file_node(const TreeContext& ctx, const std::string& path, const struct stat& st) {
  return std::make_shared<DirNode>(dir_meta_of_file(st), make_hdf5_file_provider(ctx, path, st));
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
    log::warn(what + ": " + e.what());
    nlohmann::json j = {{"sidecar_version", kSidecarVersion}, {"file", fpath},
                        {"path", dset_path}, {"is_array", false}, {"error", e.what()}};
    const std::string text = json_text(j);
    out.push_back({name + ".json", make_text_file([text] { return text; }, meta)});
    return;
  }
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
    out.push_back({name + ".npy", make_array_file(ctx, ArrayFormat::Npy, spec, meta)});
    out.push_back({name + ".raw", make_array_file(ctx, ArrayFormat::Raw, std::move(spec), meta)});
  }
  out.push_back({name + ".json", make_lazy_text_file(
                                     [engine, fpath, dset_path, npy_offset] {
                                       auto i = engine->open_file(fpath)->dataset_details(dset_path);
                                       return json_text(dataset_sidecar(*i, npy_offset));
                                     },
                                     meta)});
}

}  // namespace h5d::vfs
