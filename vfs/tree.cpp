#include "vfs/tree.h"

#include <sys/stat.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "core/log.h"

namespace h5d::vfs {

NodeMeta file_meta(const struct stat& st) {
  NodeMeta m;
  m.uid = st.st_uid;
  m.gid = st.st_gid;
  m.perm = st.st_mode & 0444;
  m.mtime = st.st_mtim;
  m.ctime = st.st_ctim;
  return m;
}

NodeMeta dir_meta_of_file(const struct stat& st) {
  NodeMeta m = file_meta(st);
  m.perm = (st.st_mode & 0444) | ((st.st_mode & 0444) >> 2);
  return m;
}

NodeMeta dir_meta(const struct stat& st) {
  NodeMeta m = file_meta(st);
  m.perm = st.st_mode & 0555;
  return m;
}

NodeMeta with_perm(NodeMeta m, mode_t perm) {
  m.perm = perm;
  return m;
}

// ---- DirNode ----------------------------------------------------------------------------------

namespace {

bool valid_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

}  // namespace

std::shared_ptr<const DirNode::Listing> DirNode::listing(InodeTable& table) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (listing_) return listing_;
  }
  std::lock_guard<std::mutex> list_lk(list_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (listing_) return listing_;  // listed by another thread meanwhile
  }
  std::vector<ChildEntry> raw = provider_ ? provider_->list() : std::vector<ChildEntry>{};
  auto l = std::make_shared<Listing>();
  l->entries.reserve(raw.size());
  for (auto& c : raw) {
    if (!c.node || !valid_name(c.name)) {
      log::warn("left out an entry with an invalid name: '" + c.name + "'");
      continue;
    }
    if (l->index.count(c.name)) {
      log::warn("left out a second entry named '" + c.name + "'");
      continue;
    }
    l->index.emplace(c.name, 0);
    l->entries.push_back(std::move(c));
  }
  std::sort(l->entries.begin(), l->entries.end(),
            [](const ChildEntry& a, const ChildEntry& b) { return a.name < b.name; });
  for (size_t i = 0; i < l->entries.size(); ++i) {
    l->index[l->entries[i].name] = i;
    table.add(l->entries[i].node);
  }
  provider_.reset();  // the listing is final; release what the provider held
  std::lock_guard<std::mutex> lk(mu_);
  listing_ = std::move(l);
  return listing_;
}

NodePtr DirNode::find(InodeTable& table, const std::string& name) {
  auto l = listing(table);
  auto it = l->index.find(name);
  return it == l->index.end() ? nullptr : l->entries[it->second].node;
}

void DirNode::add_child(InodeTable& table, const std::string& name, NodePtr node) {
  if (!valid_name(name)) fail(EINVAL, "invalid name '" + name + "'");
  listing(table);
  std::lock_guard<std::mutex> list_lk(list_mu_);  // one change at a time
  std::shared_ptr<const Listing> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old = listing_;
  }
  if (old->index.count(name)) fail(EEXIST, "'" + name + "' exists");
  auto l = std::make_shared<Listing>();
  l->entries = old->entries;
  auto pos = std::lower_bound(l->entries.begin(), l->entries.end(), name,
                              [](const ChildEntry& e, const std::string& n) { return e.name < n; });
  l->entries.insert(pos, ChildEntry{name, node});
  for (size_t i = 0; i < l->entries.size(); ++i) l->index[l->entries[i].name] = i;
  table.add(node);
  std::lock_guard<std::mutex> lk(mu_);
  listing_ = std::move(l);
}

// ---- Writes (defaults: read-only) --------------------------------------------------------------

size_t OpenFile::write(uint64_t, size_t, const char*) { fail(EBADF, "not open for writing"); }
std::unique_ptr<OpenFile> FileNode::open_write(int) { fail(EROFS, "this file is read-only"); }
void FileNode::truncate(uint64_t) { fail(EROFS, "this file is read-only"); }

// ---- InodeTable -------------------------------------------------------------------------------

InodeTable::InodeTable(NodePtr root) { add(root); }

uint64_t InodeTable::add(const NodePtr& node) {
  std::unique_lock<std::shared_mutex> lk(mu_);
  uint64_t ino = node->ino();
  if (ino) return ino;
  nodes_.push_back(node);
  ino = nodes_.size();
  node->ino_.store(ino, std::memory_order_release);
  return ino;
}

NodePtr InodeTable::get(uint64_t ino) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  if (ino == 0 || ino > nodes_.size()) return nullptr;
  return nodes_[ino - 1];
}

size_t InodeTable::size() const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  return nodes_.size();
}

// ---- Simple nodes -----------------------------------------------------------------------------

namespace {

class StringOpenFile final : public OpenFile {
 public:
  explicit StringOpenFile(std::shared_ptr<const std::string> s) : s_(std::move(s)) {}
  size_t read(uint64_t off, size_t size, char* buf) override {
    if (off >= s_->size()) return 0;
    const size_t n = std::min<uint64_t>(size, s_->size() - off);
    std::copy_n(s_->data() + off, n, buf);
    return n;
  }

 private:
  std::shared_ptr<const std::string> s_;
};

// Rendered once, at the first stat, or (lazy) at the first open: a lazy file is listed with size
// 0, its attributes not cached, until then, so listing never renders it; a read past the size
// the kernel holds makes it ask again (FUSE updates the attributes on such reads), and the true
// size is then cached like any other.
class TextFileNode final : public FileNode {
 public:
  TextFileNode(std::function<std::string()> render, const NodeMeta& meta, bool lazy)
      : FileNode(meta), render_(std::move(render)), lazy_(lazy) {}
  uint64_t size() const override {
    if (!lazy_) return content()->size();
    std::lock_guard<std::mutex> lk(mu_);
    return content_ ? content_->size() : 0;
  }
  bool is_volatile() const override {
    if (!lazy_) return false;
    std::lock_guard<std::mutex> lk(mu_);
    return !content_;
  }
  std::unique_ptr<OpenFile> open() override { return std::make_unique<StringOpenFile>(content()); }

 private:
  std::shared_ptr<const std::string> content() const {
    std::lock_guard<std::mutex> lk(mu_);
    if (!content_) content_ = std::make_shared<const std::string>(render_());
    return content_;
  }
  std::function<std::string()> render_;
  bool lazy_;
  // Lock level 1 (docs/architecture.md): before any core lock; held while rendering (one
  // rendering per file). Guards content_.
  mutable std::mutex mu_;
  mutable std::shared_ptr<const std::string> content_;
};

class DynamicFileNode final : public FileNode {
 public:
  DynamicFileNode(std::function<std::string()> render, const NodeMeta& meta)
      : FileNode(meta), render_(std::move(render)) {}
  uint64_t size() const override { return render_().size(); }
  bool is_volatile() const override { return true; }
  std::unique_ptr<OpenFile> open() override {
    auto f = std::make_unique<StringOpenFile>(std::make_shared<const std::string>(render_()));
    f->direct_io = true;
    f->keep_cache = false;
    return f;
  }

 private:
  std::function<std::string()> render_;
};

class FixedProvider final : public DirProvider {
 public:
  explicit FixedProvider(std::vector<ChildEntry> c) : c_(std::move(c)) {}
  std::vector<ChildEntry> list() override { return c_; }

 private:
  std::vector<ChildEntry> c_;
};

}  // namespace

NodePtr make_text_file(std::function<std::string()> render, const NodeMeta& meta) {
  return std::make_shared<TextFileNode>(std::move(render), meta, false);
}

NodePtr make_lazy_text_file(std::function<std::string()> render, const NodeMeta& meta) {
  return std::make_shared<TextFileNode>(std::move(render), meta, true);
}

NodePtr make_dynamic_file(std::function<std::string()> render, const NodeMeta& meta) {
  return std::make_shared<DynamicFileNode>(std::move(render), meta);
}

NodePtr make_dir_node(const NodeMeta& meta, std::vector<ChildEntry> fixed_children) {
  return std::make_shared<DirNode>(meta, std::make_unique<FixedProvider>(std::move(fixed_children)));
}

std::string dataset_stem(const std::string& name,
                         const std::function<bool(const std::string&)>& taken) {
  for (const std::string& stem : {name, name + "~ds"}) {
    if (!taken(stem + ".npy") && !taken(stem + ".raw") && !taken(stem + ".json")) return stem;
  }
  return {};
}

}  // namespace h5d::vfs
