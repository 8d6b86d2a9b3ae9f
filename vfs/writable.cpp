#include "vfs/writable.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"
#include "vfs/dataset_spec.h"
#include "vfs/npy.h"
#include "vfs/sidecar.h"

namespace h5d::vfs {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// What NAME.npy, NAME.raw and NAME.json of one new dataset share. `mu` is taken before the
// HDF5 lock (dataset creation); nothing holding the HDF5 lock takes it.
struct NewDatasetState {
  const TreeContext& ctx;
  InodeTable& table;
  std::weak_ptr<DirNode> dir;
  std::string file, dset, stem;
  NodeMeta meta;

  std::mutex mu;          // lock level 1 (docs/architecture.md), before the HDF5 lock; guards all below
  DatasetWriterPtr w;     // set once created
  std::string header;     // the .npy header shown (as written by the creator, or rendered)
  std::string pending;    // .npy header bytes or .json spec text being written
  std::string sidecar;    // rendered once created

  NewDatasetState(const TreeContext& c, InodeTable& t) : ctx(c), table(t) {}

  DatasetWriterPtr writer() {
    std::lock_guard<std::mutex> lk(mu);
    return w;
  }
};
using StatePtr = std::shared_ptr<NewDatasetState>;

enum class Kind { Npy, Raw, Json };

std::string render_sidecar(NewDatasetState& s) {
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.sidecar.empty()) return s.sidecar;
  try {
    auto info = s.ctx.files.open(s.file)->dataset_details(s.dset);
    s.sidecar = json_text(dataset_sidecar(*info, s.header.size()));
  } catch (const std::exception& e) {
    log::warn(s.file + ":" + s.dset + ": sidecar: " + e.what());
    return "{}\n";
  }
  return s.sidecar;
}

class NewFileNode;

// A .npy (header, then the dataset's bytes) or .raw (no header) file over a dataset writer:
// reads n bytes at `off` (n already clipped to the file) ...
size_t read_head_then_data(const std::string& header, DatasetWriter& w, uint64_t off, uint64_t n, char* buf) {
  const HeadSplit part = split_at_header(header.size(), off, n);
  std::memcpy(buf, header.data() + off, static_cast<size_t>(part.head));
  if (part.data_len) w.read(part.data_off, part.data_len, reinterpret_cast<uint8_t*>(buf) + part.head);
  return static_cast<size_t>(n);
}

// ... and writes: header bytes must be the header's, data bytes land in the dataset.
void write_head_then_data(const std::string& header, DatasetWriter& w, uint64_t off, uint64_t n, const char* buf,
                          const std::string& stem) {
  const std::string what = stem.empty() ? std::string() : stem + ": ";
  const HeadSplit part = split_at_header(header.size(), off, n);
  if (part.head && std::memcmp(buf, header.data() + off, static_cast<size_t>(part.head)) != 0)
    fail(EINVAL, what + "the .npy header cannot change once the dataset exists");
  if (!part.data_len) return;
  if (part.data_off > w.nbytes() || part.data_len > w.nbytes() - part.data_off)
    fail(EFBIG, what + "write past the end of the data (" + std::to_string(w.nbytes()) + " bytes)");
  w.write(part.data_off, reinterpret_cast<const uint8_t*>(buf) + part.head, static_cast<size_t>(part.data_len));
}
void add_siblings(const StatePtr& s, Kind created_by);

// Creates the dataset (s.mu held). `spec` from the .npy header or the JSON spec.
void create_dataset(NewDatasetState& s, const NewDataset& spec, std::string header) {
  s.w = s.ctx.writer->create_dataset(s.file, s.dset, spec);
  s.header = std::move(header);
}

class NewOpenFile final : public OpenFile {
 public:
  NewOpenFile(StatePtr s, Kind kind, bool for_write)
      : s_(std::move(s)), kind_(kind), for_write_(for_write) {
    // NAME.npy and NAME.raw are two inodes (two page caches) over the same bytes: an open drops
    // what the kernel cached (dirty pages are written first), so bytes written through the other
    // name are seen.
    keep_cache = false;
  }

  size_t read(uint64_t off, size_t size, char* buf) override {
    if (kind_ == Kind::Json) {
      std::string text;
      if (s_->writer()) {
        text = render_sidecar(*s_);
      } else {
        std::lock_guard<std::mutex> lk(s_->mu);
        text = s_->pending;
      }
      if (off >= text.size()) return 0;
      const size_t n = std::min<uint64_t>(size, text.size() - off);
      std::memcpy(buf, text.data() + off, n);
      return n;
    }
    std::string header;
    DatasetWriterPtr w;
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      w = s_->w;
      if (!w) {  // the .npy header being written
        const std::string& p = s_->pending;
        if (off >= p.size()) return 0;
        const size_t n = std::min<uint64_t>(size, p.size() - off);
        std::memcpy(buf, p.data() + off, n);
        return n;
      }
      if (kind_ == Kind::Npy) header = s_->header;
    }
    const uint64_t total = header.size() + w->nbytes();
    if (off >= total || size == 0) return 0;
    return read_head_then_data(header, *w, off, std::min<uint64_t>(off + size, total) - off, buf);
  }

  size_t write(uint64_t off, size_t size, const char* buf) override {
    if (kind_ == Kind::Json) return write_json(off, size, buf);
    DatasetWriterPtr w;
    std::string header;
    {
      std::unique_lock<std::mutex> lk(s_->mu);
      if (!s_->w) {
        if (kind_ != Kind::Npy) fail(EINVAL, "no dataset yet");
        std::string& p = s_->pending;
        if (off > p.size()) fail(EINVAL, s_->stem + ".npy: write the .npy header first");
        if (p.size() < off + size) p.resize(off + size, '\0');
        std::memcpy(&p[off], buf, size);
        const size_t hl = npy_header_length(p);
        if (hl > kMaxSpecBytes || p.size() > kMaxSpecBytes) {
          p.clear();
          fail(EFBIG, s_->stem + ".npy: a .npy header is at most 1 MiB");
        }
        if (hl == 0 || p.size() < hl) return size;
        std::string rest = p.substr(hl);
        try {
          const NpyHeader h = parse_npy_header(p);
          create_dataset(*s_, spec_from_npy(h, s_->ctx.writer->options()), p.substr(0, hl));
        } catch (const Error&) {
          p.clear();  // a refused header is not kept: writing a new one starts over
          throw;
        }
        p.clear();
        lk.unlock();
        add_siblings(s_, Kind::Npy);
        if (!rest.empty()) {
          if (rest.size() > s_->w->nbytes()) fail(EFBIG, s_->stem + ".npy: write past the end");
          s_->w->write(0, reinterpret_cast<const uint8_t*>(rest.data()), rest.size());
        }
        return size;
      }
      w = s_->w;
      if (kind_ == Kind::Npy) header = s_->header;
    }
    write_head_then_data(header, *w, off, size, buf, s_->stem);
    return size;
  }

  void flush(bool durable) override {
    if (!for_write_) return;
    if (kind_ == Kind::Json) {
      bool created = false;
      {
        std::lock_guard<std::mutex> lk(s_->mu);
        if (!s_->w && !s_->pending.empty()) {
          const NewDataset spec = spec_from_json(s_->pending, s_->ctx.writer->options());
          create_dataset(*s_, spec, "");
          created = true;
        }
      }
      if (created) {
        // The .npy header as h5direct renders it (what reading the dataset later shows).
        auto info = s_->ctx.files.open(s_->file)->dataset_info(s_->dset);
        {
          std::lock_guard<std::mutex> lk(s_->mu);
          s_->header = npy_header(info->dtype, info->shape);
        }
        add_siblings(s_, Kind::Json);
      }
    }
    if (DatasetWriterPtr w = s_->writer()) w->flush(durable);
  }

 private:
  size_t write_json(uint64_t off, size_t size, const char* buf) {
    std::lock_guard<std::mutex> lk(s_->mu);
    if (s_->w) fail(EINVAL, s_->stem + ".json: the dataset exists already");
    std::string& p = s_->pending;
    if (off + size > kMaxSpecBytes) fail(EFBIG, s_->stem + ".json: a spec is at most 1 MiB");
    if (p.size() < off + size) p.resize(off + size, ' ');
    std::memcpy(&p[off], buf, size);
    return size;
  }

  StatePtr s_;
  Kind kind_;
  bool for_write_;
};

class NewFileNode final : public FileNode {
 public:
  NewFileNode(StatePtr s, Kind kind) : FileNode(s->meta), s_(std::move(s)), kind_(kind) {}

  uint64_t size() const override {
    if (kind_ == Kind::Json) {
      if (s_->writer()) return render_sidecar(*s_).size();
      std::lock_guard<std::mutex> lk(s_->mu);
      return s_->pending.size();
    }
    std::lock_guard<std::mutex> lk(s_->mu);
    if (!s_->w) return s_->pending.size();
    return (kind_ == Kind::Npy ? s_->header.size() : 0) + s_->w->nbytes();
  }
  bool is_volatile() const override { return true; }
  std::unique_ptr<OpenFile> open() override { return std::make_unique<NewOpenFile>(s_, kind_, false); }
  std::unique_ptr<OpenFile> open_write(int) override {
    return std::make_unique<NewOpenFile>(s_, kind_, true);
  }
  void truncate(uint64_t size) override {
    std::lock_guard<std::mutex> lk(s_->mu);
    if (!s_->w) {
      if (size <= s_->pending.size()) {
        s_->pending.resize(size);
        return;
      }
      if (kind_ == Kind::Json) {
        s_->pending.resize(size, ' ');
        return;
      }
      fail(EINVAL, s_->stem + ".npy: write the .npy header before extending the file");
    }
    const uint64_t total = (kind_ == Kind::Npy ? s_->header.size() : 0) + s_->w->nbytes();
    if (kind_ == Kind::Json || size != total) {
      fail(EINVAL, s_->stem + ": the size is fixed by the dataset's shape (" + std::to_string(total) +
                       " bytes)");
    }
  }

 private:
  StatePtr s_;
  Kind kind_;
};

void add_siblings(const StatePtr& s, Kind created_by) {
  auto dir = s->dir.lock();
  if (!dir) return;
  for (Kind k : {Kind::Npy, Kind::Raw, Kind::Json}) {
    if (k == created_by) continue;
    const std::string name = s->stem + (k == Kind::Npy ? ".npy" : k == Kind::Raw ? ".raw" : ".json");
    try {
      dir->add_child(s->table, name, std::make_shared<NewFileNode>(s, k));
    } catch (const std::exception& e) {
      log::warn(s->file + ":" + s->dset + ": " + e.what());
    }
  }
}

class InplaceOpenFile final : public OpenFile {
 public:
  InplaceOpenFile(std::string header, DatasetWriterPtr w) : header_(std::move(header)), w_(std::move(w)) {}
  size_t read(uint64_t off, size_t size, char* buf) override {
    const uint64_t total = header_.size() + w_->nbytes();
    if (off >= total || size == 0) return 0;
    return read_head_then_data(header_, *w_, off, std::min<uint64_t>(off + size, total) - off, buf);
  }
  size_t write(uint64_t off, size_t size, const char* buf) override {
    write_head_then_data(header_, *w_, off, size, buf, "");
    return size;
  }
  void flush(bool durable) override { w_->flush(durable); }

 private:
  std::string header_;
  DatasetWriterPtr w_;
};

}  // namespace

bool is_hdf5_name(const std::string& name) {
  for (const char* e : {".h5", ".hdf5", ".hdf", ".nxs", ".cxi", ".nx"}) {
    if (ends_with(name, e)) return true;
  }
  return false;
}

NodePtr make_directory(const TreeContext& ctx, InodeTable& table, DirNode& parent,
                       const std::string& name, const NodeMeta& meta) {
  if (!ctx.writer) fail(EROFS, "read-only filesystem");
  const WriteTarget& t = parent.write_target();
  if (parent.find(table, name)) fail(EEXIST, "'" + name + "' exists");
  std::shared_ptr<DirNode> node;
  if (t.kind == WriteTarget::SourceDir) {
    const std::string path = join(t.path, name);
    if (is_hdf5_name(name)) {
      // The file belongs to the requesting user, with the mode asked for (w kept, x dropped);
      // what is shown then follows the file on disk, as for any source file.
      const NewFileOwner owner{meta.uid, meta.gid, meta.perm};
      ctx.writer->create_file(path, &owner);
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) fail(errno, "stat " + path + ": " + std::strerror(errno));
      node = std::make_shared<DirNode>(source_meta(path, st, MetaRule::DirOfFileWritable), nullptr);
      node->set_write_target({WriteTarget::NewGroup, path, "/"});
    } else {
      if (::mkdir(path.c_str(), meta.perm & 0777) != 0) {
        fail(errno, "mkdir " + path + ": " + std::strerror(errno));
      }
      if (::geteuid() == 0) {
        // Through a descriptor of the directory itself (O_NOFOLLOW): never a symlink put in
        // its place meanwhile.
        const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || ::fchown(fd, meta.uid, meta.gid) != 0) {
          log::warn(path + ": cannot give it to uid " + std::to_string(meta.uid) + ": " + std::strerror(errno));
        }
        if (fd >= 0) ::close(fd);
      }
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) fail(errno, "stat " + path + ": " + std::strerror(errno));
      NodePtr n = make_source_dir_node(ctx, path, st);
      parent.add_child(table, name, n);
      return n;
    }
  } else if (t.kind == WriteTarget::NewGroup) {
    const std::string group = join(t.group, name);
    ctx.writer->create_group(t.path, group);
    node = std::make_shared<DirNode>(parent.meta(), nullptr);  // what the file has
    node->set_write_target({WriteTarget::NewGroup, t.path, group});
  } else {
    fail(EPERM, "new directories only in source directories (a new NAME.h5 file) and in files "
                "created through this mount (a group)");
  }
  parent.add_child(table, name, node);
  return node;
}

std::pair<NodePtr, std::unique_ptr<OpenFile>> create_file(const TreeContext& ctx, InodeTable& table,
                                                          const std::shared_ptr<DirNode>& parent,
                                                          const std::string& name,
                                                          const NodeMeta& meta) {
  if (!ctx.writer) fail(EROFS, "read-only filesystem");
  const WriteTarget& t = parent->write_target();
  if (t.kind != WriteTarget::NewGroup) {
    fail(EPERM, "new files only inside HDF5 files created through this mount (mkdir NAME.h5 first)");
  }
  Kind kind;
  std::string stem;
  if (ends_with(name, ".npy")) {
    kind = Kind::Npy;
    stem = name.substr(0, name.size() - 4);
  } else if (ends_with(name, ".json")) {
    kind = Kind::Json;
    stem = name.substr(0, name.size() - 5);
  } else {
    fail(EPERM, "'" + name + "': create NAME.npy (write a .npy header) or NAME.json (a dataset spec)");
  }
  for (const char* ext : {"", ".npy", ".raw", ".json"}) {
    if (parent->find(table, stem + ext)) fail(EEXIST, "'" + stem + ext + "' exists");
  }
  auto s = std::make_shared<NewDatasetState>(ctx, table);
  s->dir = parent;
  s->file = t.path;
  s->dset = join(t.group, stem);
  s->stem = stem;
  // A dataset lives in the file: shown with the file's owner and r/w bits (it follows them).
  s->meta = parent->meta().source ? parent->meta() : meta;
  if (s->meta.source) s->meta.rule = MetaRule::FileWritable;
  auto node = std::make_shared<NewFileNode>(s, kind);
  parent->add_child(table, name, node);
  return {node, std::make_unique<NewOpenFile>(s, kind, true)};
}

std::unique_ptr<OpenFile> make_inplace_open_file(std::string header, DatasetWriterPtr w) {
  return std::make_unique<InplaceOpenFile>(std::move(header), std::move(w));
}

}  // namespace h5d::vfs
