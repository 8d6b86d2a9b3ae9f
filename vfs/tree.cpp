#include "vfs/tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/log.h"

namespace h5d::vfs {

mode_t perm_by_rule(MetaRule rule, mode_t st_mode) {
  const mode_t r = st_mode & 0444, w = st_mode & 0222;
  switch (rule) {
    case MetaRule::Fixed: return st_mode & 07777;
    case MetaRule::File: return r;
    case MetaRule::FileWritable: return r | w;
    case MetaRule::DirOfFile: return r | (r >> 2);
    case MetaRule::DirOfFileWritable: return r | (r >> 2) | w;
    case MetaRule::Dir: return st_mode & 0555;
    case MetaRule::DirWritable: return st_mode & 0777;
  }
  return 0;
}

namespace {
void follow(NodeMeta& m, const struct stat& st) {
  m.uid = st.st_uid;
  m.gid = st.st_gid;
  if (m.rule != MetaRule::Fixed) m.perm = perm_by_rule(m.rule, st.st_mode);
  m.mtime = st.st_mtim;
  m.ctime = st.st_ctim;
}
NodeMeta by_rule(const struct stat& st, MetaRule rule) {
  NodeMeta m;
  m.rule = rule;
  follow(m, st);
  return m;
}
}  // namespace

NodeMeta file_meta(const struct stat& st) { return by_rule(st, MetaRule::File); }
NodeMeta dir_meta_of_file(const struct stat& st) { return by_rule(st, MetaRule::DirOfFile); }
NodeMeta dir_meta(const struct stat& st) { return by_rule(st, MetaRule::Dir); }

NodeMeta source_meta(const std::string& path, const struct stat& st, MetaRule rule) {
  NodeMeta m = by_rule(st, rule);
  m.source = std::make_shared<const std::string>(path);
  return m;
}

NodeMeta with_also(NodeMeta m, const std::vector<std::string>& paths) {
  std::vector<std::string> others = m.also ? *m.also : std::vector<std::string>{};
  for (const std::string& p : paths) {
    char buf[PATH_MAX];
    const std::string real = ::realpath(p.c_str(), buf) ? std::string(buf) : p;
    if ((!m.source || real != *m.source) && std::find(others.begin(), others.end(), real) == others.end()) {
      others.push_back(real);
    }
  }
  if (!others.empty()) m.also = std::make_shared<const std::vector<std::string>>(std::move(others));
  return m;
}

NodeMeta with_perm(NodeMeta m, mode_t perm) {
  m.perm = perm;
  m.rule = MetaRule::Fixed;
  return m;
}

NodeMeta current_meta(const NodeMeta& m) {
  if (!m.source) return m;
  struct stat st;
  if (::stat(m.source->c_str(), &st) != 0) return m;  // gone: opening it will say so
  NodeMeta now = m;
  follow(now, st);
  return now;
}

// ---- Access as the kernel would decide it ---------------------------------------------------

bool Caller::in_group(gid_t g) const {
  return g == gid || std::find(groups.begin(), groups.end(), g) != groups.end();
}

bool parse_status_groups(const std::string& status, std::vector<gid_t>& out) {
  const size_t at = status.compare(0, 7, "Groups:") == 0 ? 0 : status.find("\nGroups:");
  if (at == std::string::npos) return false;
  const size_t begin = status.find(':', at) + 1;
  const size_t end = std::min(status.find('\n', begin), status.size());
  std::vector<gid_t> g;
  size_t i = begin;
  while (i < end) {
    if (status[i] == ' ' || status[i] == '\t') {
      ++i;
      continue;
    }
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < end && status[i] >= '0' && status[i] <= '9'; ++i, ++digits) {
      v = v * 10 + uint64_t(status[i] - '0');
      if (v > UINT32_MAX) return false;
    }
    if (digits == 0) return false;
    g.push_back(static_cast<gid_t>(v));
  }
  out = std::move(g);
  return true;
}

bool thread_groups(long tid, std::vector<gid_t>& out) {
  const std::string t = std::to_string(tid);
  for (const std::string& p : {"/proc/" + t + "/task/" + t + "/status", "/proc/" + t + "/status"}) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1u << 20)) text.append(buf, size_t(n));
    ::close(fd);
    if (parse_status_groups(text, out)) return true;
  }
  return false;
}

bool permits(const Caller& c, uid_t uid, gid_t gid, mode_t mode, int want) {
  if (c.uid == 0) return true;  // CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (ACLs are not read)
  const mode_t bits = c.uid == uid ? (mode >> 6) & 7 : c.in_group(gid) ? (mode >> 3) & 7 : mode & 7;
  return (static_cast<int>(bits) & want) == want;
}

namespace {
// `want_file`: what `c` needs on `p` when it is not a directory (R_OK; 0: reaching it is enough).
void check_path(const Caller& c, const std::string& p, int want_dir, int want_file) {
  struct stat st;
  if (::stat("/", &st) == 0 && !permits(c, st.st_uid, st.st_gid, st.st_mode, X_OK)) {
    fail(EACCES, "uid " + std::to_string(c.uid) + " may not pass through /");
  }
  // Every directory on the way, from the root: as path resolution checks them.
  for (size_t i = p.find('/', 1); i != std::string::npos; i = p.find('/', i + 1)) {
    const std::string dir = p.substr(0, i);
    if (::stat(dir.c_str(), &st) != 0) fail(errno == ENOENT ? ENOENT : EACCES, dir + ": " + std::strerror(errno));
    if (!permits(c, st.st_uid, st.st_gid, st.st_mode, X_OK)) {
      fail(EACCES, "uid " + std::to_string(c.uid) + " may not pass through " + dir + " (on the way to " + p + ")");
    }
  }
  if (::stat(p.c_str(), &st) != 0) fail(errno, p + ": " + std::strerror(errno));
  const int want = S_ISDIR(st.st_mode) ? want_dir : want_file;
  if (want && !permits(c, st.st_uid, st.st_gid, st.st_mode, want)) {
    fail(EACCES, "uid " + std::to_string(c.uid) + " may not " + (want & R_OK ? "read " : "enter ") + p);
  }
}
}  // namespace

void check_access(const Caller& c, const NodeMeta& m, int want_dir) {
  if (c.uid == 0) return;
  if (m.source) check_path(c, *m.source, want_dir, R_OK);
  if (m.also) {
    for (const std::string& p : *m.also) check_path(c, p, R_OK, R_OK);
  }
}

void check_reach(const Caller& c, const NodeMeta& m) {
  if (c.uid == 0) return;
  if (m.source) check_path(c, *m.source, 0, 0);
  if (m.also) {
    for (const std::string& p : *m.also) check_path(c, p, 0, 0);
  }
}

// ---- Symlink loops ----------------------------------------------------------------------------

DirChainPtr chain_with(DirChainPtr up, const struct stat& st) {
  return std::make_shared<const DirChain>(DirChain{st.st_dev, st.st_ino, std::move(up)});
}

bool chain_has(const DirChain* c, const struct stat& st) {
  for (; c; c = c->up.get()) {
    if (c->dev == st.st_dev && c->ino == st.st_ino) return true;
  }
  return false;
}

// ---- DirNode ----------------------------------------------------------------------------------

namespace {

bool valid_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

}  // namespace

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The listing of what a provider listed, sorted by name, each node registered in `table`; an
// entry with an invalid name, or a name taken already, is left out (logged).
std::shared_ptr<DirNode::Listing> sorted_listing(std::vector<ChildEntry>& raw, InodeTable& table) {
  auto l = std::make_shared<DirNode::Listing>();
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
  return l;
}

// Tells the table's listener (and the debug log) which names of directory `ino` a new listing
// changed.
void tell_changed(InodeTable& table, uint64_t ino, const std::vector<std::string>& changed) {
  if (log::debug_enabled()) {
    log::debug("directory inode " + std::to_string(ino) + " listed again: " + std::to_string(changed.size()) +
               " name(s) changed, the first '" + changed.front() + "'");
  }
  if (TreeListener* t = table.listener()) t->names_changed(ino, changed);
}

}  // namespace

std::shared_ptr<const DirNode::Listing> DirNode::listing(InodeTable& table) {
  int64_t interval_ns = interval_ns_.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (listing_ && (interval_ns <= 0 || steady_ns() - checked_ns_ < interval_ns)) return listing_;
  }
  std::unique_lock<std::mutex> list_lk(list_mu_, std::defer_lock);
  std::shared_ptr<const Listing> current;
  {
    std::lock_guard<std::mutex> lk(mu_);
    current = listing_;
  }
  if (current) {
    // A check is due: one thread makes it, the others go on with the listing they have.
    if (!list_lk.try_lock()) return current;
  } else {
    list_lk.lock();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (listing_ != current) return listing_;  // listed by another thread meanwhile
    if (listing_ && (interval_ns <= 0 || steady_ns() - checked_ns_ < interval_ns)) return listing_;  // just checked
  }
  std::vector<ChildEntry> raw;
  if (current) {
    bool changed = false;
    try {
      changed = provider_->changed();
    } catch (const std::exception& e) {
      log::warn(std::string("checking a directory's source for changes: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      checked_ns_ = steady_ns();
    }
    if (!changed) return current;
    try {
      raw = provider_->list();
    } catch (const std::exception& e) {
      log::warn(std::string("listing a changed directory again failed; it keeps its listing: ") + e.what());
      return current;
    }
  } else {
    raw = provider_ ? provider_->list() : std::vector<ChildEntry>{};
  }
  std::shared_ptr<Listing> l = sorted_listing(raw, table);
  if (!current && provider_) {
    interval_ns = static_cast<int64_t>(provider_->revalidate_seconds() * 1e9);
    interval_ns_.store(interval_ns, std::memory_order_release);
  }
  if (interval_ns <= 0) provider_.reset();  // the listing is final; release what the provider held
  std::vector<std::string> changed;
  if (current) changed = changed_names(*current, *l);
  std::shared_ptr<const Listing> now;
  {
    std::lock_guard<std::mutex> lk(mu_);
    listing_ = std::move(l);
    checked_ns_ = steady_ns();
    now = listing_;
  }
  // Still under list_mu_: the next relisting's names reach the listener after these.
  if (!changed.empty()) tell_changed(table, ino(), changed);
  return now;
}

std::vector<std::string> DirNode::changed_names(const Listing& before, const Listing& after) {
  std::vector<std::string> out;
  // Both sorted by name: one merge.
  size_t i = 0, j = 0;
  while (i < before.entries.size() || j < after.entries.size()) {
    if (j == after.entries.size() || (i < before.entries.size() && before.entries[i].name < after.entries[j].name)) {
      out.push_back(before.entries[i++].name);  // removed
    } else if (i == before.entries.size() || after.entries[j].name < before.entries[i].name) {
      out.push_back(after.entries[j++].name);  // added
    } else {
      if (before.entries[i].node != after.entries[j].node) out.push_back(after.entries[j].name);  // replaced
      ++i;
      ++j;
    }
  }
  return out;
}

NodePtr DirNode::find(InodeTable& table, const std::string& name) {
  bool listed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    listed = listing_ != nullptr;
  }
  if (!listed) {
    std::lock_guard<std::mutex> list_lk(list_mu_);
    {
      std::lock_guard<std::mutex> lk(mu_);
      listed = listing_ != nullptr;
    }
    if (!listed && provider_ && valid_name(name)) {
      if (NodePtr n = provider_->find_unlisted(name)) {
        table.add(n);
        return n;
      }
    }
  }
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

// Rendered once, at the first stat or open (never at listing): its size is that of the bytes
// it serves, and neither changes for the node's life, so its attributes and pages are cached as
// any other file's (a source that changes is listed again, with new nodes).
class TextFileNode final : public FileNode {
 public:
  TextFileNode(std::function<std::string()> render, const NodeMeta& meta)
      : FileNode(meta), render_(std::move(render)) {}
  uint64_t size() const override { return content()->size(); }
  std::unique_ptr<OpenFile> open() override { return std::make_unique<StringOpenFile>(content()); }

 private:
  std::shared_ptr<const std::string> content() const {
    std::lock_guard<std::mutex> lk(mu_);
    if (!content_) {
      content_ = std::make_shared<const std::string>(render_());
      render_ = nullptr;  // what it held (a run, a batch) is not needed again
    }
    return content_;
  }
  mutable std::function<std::string()> render_;  // guarded by mu_
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
  return std::make_shared<TextFileNode>(std::move(render), meta);
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
