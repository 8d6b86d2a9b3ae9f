#include "fusefs/adapter.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/log.h"
#include "vfs/kernel_policy.h"

namespace h5d::fusefs {

void PerFileReadahead::enable(unsigned now_kb, std::function<void(unsigned)> set) {
  std::lock_guard<std::mutex> lk(mu_);
  now_ = now_kb;
  set_ = std::move(set);
}

void PerFileReadahead::answer(unsigned kb, const std::function<void()>& reply) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!set_ || kb == 0) {
    lk.unlock();
    reply();
    return;
  }
  if (now_ != kb) {
    const auto since = std::chrono::steady_clock::now() - used_;
    if (since < kSettle) std::this_thread::sleep_for(kSettle - since);
    set_(kb);
    now_ = kb;
  }
  reply();
  used_ = std::chrono::steady_clock::now();
}

bool RepeatedFailures::repeat(uint64_t ino, int err, const Place& place, const std::string& message) {
  const std::string what = place.empty() ? message : place.file + '\n' + place.dataset + '\n' + place.chunk;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(mu_);
  for (const Seen& s : seen_) {
    if (s.ino == ino && s.err == err && s.what == what && now - s.at < kWindow) return true;
  }
  // The reported failure is remembered (the oldest one goes): a repeat never extends the window,
  // so a reader failing again and again gets a line every kWindow.
  if (seen_.size() >= kKeep) seen_.erase(seen_.begin());
  seen_.push_back({ino, err, what, now});
  return false;
}

void Handles::remove(const void* p) {
  std::shared_ptr<void> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    h = std::move(it->second);
    live_.erase(it);
  }
}

void Handles::clear() {
  std::unordered_map<const void*, std::shared_ptr<void>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(live_);
  }
  if (!left.empty()) log::info(std::to_string(left.size()) + " handle(s) never released by the kernel freed at exit");
}

void Invalidator::names_changed(uint64_t dir_ino, const std::vector<std::string>& names) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || !se_) return;
    for (const std::string& n : names) {
      if (queue_.size() >= kMaxQueued) break;
      queue_.push_back({dir_ino, n});
    }
    queue_.push_back({dir_ino, ""});
  }
  cv_.notify_one();
}

void Invalidator::start(fuse_session* se) {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  se_ = se;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void Invalidator::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void Invalidator::run() {
  std::vector<Item> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;  // unmounting: nothing left to keep in step
      batch.swap(queue_);
    }
    for (const Item& it : batch) {
      // ENOENT: the kernel holds nothing of that inode or name (nothing to forget).
      const int rc = it.name.empty()
                         ? fuse_lowlevel_notify_inval_inode(se_, it.parent, 0, 0)
                         : fuse_lowlevel_notify_inval_entry(se_, it.parent, it.name.c_str(), it.name.size());
      if (rc == 0) sent_.fetch_add(1, std::memory_order_relaxed);
      else if (rc != -ENOENT && log::debug_enabled()) {
        log::debug("invalidating " + (it.name.empty() ? std::string("directory") : "'" + it.name + "' in") +
                   " inode " + std::to_string(it.parent) + ": " + std::strerror(-rc));
      }
    }
    batch.clear();
  }
}

size_t splice_pipe_max() {
  size_t v = 1u << 20;  // the kernel's default
  if (FILE* f = std::fopen("/proc/sys/fs/pipe-max-size", "r")) {
    unsigned long x = 0;
    if (std::fscanf(f, "%lu", &x) == 1 && x >= 4096) v = x;
    std::fclose(f);
  }
  return v;
}

// Pages of libfuse's pipe that are neither the reply's bytes nor a page per buffer: its header,
// one page more in its own estimate, and our rounding of the header up to a page.
constexpr size_t kSplicePipeExtraPages = 3;

size_t splice_max_read() {
  return (splice_pipe_max() - (kSpliceBuffers + kSplicePipeExtraPages) * 4096) / 4096 * 4096;
}

size_t splice_buffers(size_t size) {
  static const size_t pipe = splice_pipe_max();
  const size_t pages = (pipe > size ? pipe - size : 0) / 4096;
  return pages > kSplicePipeExtraPages ? pages - kSplicePipeExtraPages : 0;
}

namespace {

Context& ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }
vfs::Vfs& fs(fuse_req_t req) { return *ctx(req).vfs; }

struct stat to_stat(const vfs::Attr& a) {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  st.st_mtim = a.mtime;
  st.st_atim = a.mtime;
  st.st_ctim = a.ctime;
  return st;
}

// The requesting user for the daemon's own access checks (vfs::check_access), or nullptr when
// there is nothing to check: root, and the daemon's own user (who reaches whatever the daemon
// reads with the same rights).
const vfs::Caller* caller_of(fuse_req_t req, vfs::Caller& c) {
  const fuse_ctx* fc = fuse_req_ctx(req);
  if (fc->uid == 0 || fc->uid == ::geteuid()) return nullptr;
  c.uid = fc->uid;
  c.gid = fc->gid;
  if (!vfs::thread_groups(static_cast<long>(fc->pid), c.groups)) {
    // The process is gone, or /proc unreadable: the primary group alone.
    log::debug("uid " + std::to_string(c.uid) + ": supplementary groups unknown (/proc/" +
               std::to_string(fc->pid) + "/status)");
    c.groups.clear();
  }
  return &c;
}

// How long the kernel keeps what it is told: decided by vfs (vfs/kernel_policy.h).
double attr_timeout(fuse_req_t req, const vfs::Attr& a) { return vfs::attr_ttl(a, ctx(req).timeouts()); }
double entry_timeout(fuse_req_t req, const vfs::Attr& a) { return vfs::entry_ttl(a, ctx(req).timeouts()); }

// The one place a failed request becomes an errno reply: logged once (expected errors such as
// ENOENT only at debug level), counted, replied. Each one worth a line is reported with its
// place (log::report: the recent errors of stats.json and the lines of .h5direct/log).
void fail_request(fuse_req_t req, const char* op, uint64_t ino, std::exception_ptr e) {
  std::string msg;
  bool logged = false;
  Place place;
  const int err = errno_of(e, &msg, &logged, &place);
  Context& c = ctx(req);
  if (c.vfs) c.vfs->note_error(err);
  const std::string line = std::string(op) + " (inode " + std::to_string(ino) + "): " + msg;
  // Its one line is in the log already (a failed HDF5 helper), and reported; or it is the
  // kernel asking again for a read that just failed (RepeatedFailures).
  if (logged || (std::strcmp(op, "read") == 0 && c.read_failures.repeat(ino, err, place, msg))) {
    log::debug(line);
    fuse_reply_err(req, err);
    return;
  }
  switch (err) {
    case ENOENT: case EROFS: case EISDIR: case ENOTDIR: case EINVAL:
      log::debug(line);
      break;
    case EACCES: case EPERM:  // a user denied by the daemon's own checks: worth knowing who
      log::report(log::Level::Info, err, place, line);
      break;
    default:
      log::report(log::Level::Error, err, place, line);
  }
  fuse_reply_err(req, err);
}

template <class Fn>
void guarded(fuse_req_t req, const char* op, uint64_t ino, Fn&& fn) {
  try {
    fn();
  } catch (...) {
    fail_request(req, op, ino, std::current_exception());
  }
}

void op_init(void* userdata, fuse_conn_info* conn) {
  Context& c = *static_cast<Context*>(userdata);
  if (c.at_init) c.at_init(c, conn);
  c.initialized = true;
  // We do not implement readdirplus; let the kernel use plain readdir + lookup.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_READDIRPLUS);  // want is unsigned
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_READDIRPLUS_AUTO);
  // Spliced replies (op_read): libfuse then moves file-backed reply buffers through a pipe.
  c.means.splice = c.opts.splice && (conn->capable & FUSE_CAP_SPLICE_WRITE);
  if (c.means.splice) {
    conn->want |= FUSE_CAP_SPLICE_WRITE;
    c.means.splice_max = splice_max_read();
  }
  c.means.push = c.opts.push && c.se;
  if (c.max_read) conn->max_read = c.max_read;
  // The kernel sends read-ahead (and every page-cache read) as background requests, at most
  // max_background at once per mount (12 by default): readers blocked on a source that never
  // answers (data on tape) would hold them all, and then every other file's reads would wait in
  // the kernel before reaching us. Allow as many as there are request threads (the kernel caps
  // it for users at fs.fuse.max_user_bgreq).
  conn->max_background = std::max<unsigned>(conn->max_background, c.opts.max_threads);
  conn->congestion_threshold = std::max<unsigned>(conn->congestion_threshold, conn->max_background * 3 / 4);
}

fuse_entry_param entry_of(fuse_req_t req, const vfs::Attr& a) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  e.ino = a.ino;
  e.generation = 1;
  e.attr = to_stat(a);
  e.attr_timeout = attr_timeout(req, a);
  e.entry_timeout = entry_timeout(req, a);
  return e;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  try {
    vfs::Caller who;
    const fuse_entry_param e = entry_of(req, fs(req).lookup(parent, name, caller_of(req, who)));
    fuse_reply_entry(req, &e);
  } catch (const Error& err) {
    if (err.code() == ENOENT) {
      // A negative entry, kept as long as vfs says (vfs/kernel_policy.h).
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.entry_timeout = fs(req).negative_entry_ttl(parent, ctx(req).timeouts());
      fuse_reply_entry(req, &e);
      return;
    }
    fail_request(req, "lookup", parent, std::current_exception());
  } catch (...) {
    fail_request(req, "lookup", parent, std::current_exception());
  }
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  guarded(req, "getattr", ino, [&] {
    const vfs::Attr a = fs(req).getattr(ino);
    const struct stat st = to_stat(a);
    fuse_reply_attr(req, &st, attr_timeout(req, a));
  });
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  guarded(req, "readlink", ino, [&] {
    const std::string t = fs(req).readlink(ino);
    fuse_reply_readlink(req, t.c_str());
  });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "open", ino, [&] {
    vfs::Caller who;
    std::unique_ptr<vfs::OpenFile> f = fs(req).open(ino, fi->flags, caller_of(req, who));
    fi->direct_io = f->direct_io;
    fi->keep_cache = f->keep_cache;
    Context& c = ctx(req);
    const unsigned kb = f->choose_readahead_kb(c.opts.push, c.readahead_kb);
    vfs::OpenFile* p = c.handles.add(std::move(f));  // before the reply: a release may follow at once
    fi->fh = reinterpret_cast<uint64_t>(p);
    c.readahead.answer(kb, [&] {
      if (fuse_reply_open(req, fi) != 0) c.handles.remove(p);  // the request was interrupted
    });
  });
}

// Pushes bytes into the page cache (notify_store); whether the kernel took them. Never through a
// pipe: with splicing wanted (spliced replies), libfuse would otherwise copy a buffer of 8 KiB and
// more into a pipe and splice that, a copy and a pipe page allocation per page more than one
// writev (docs/benchmarks.md, "What each mechanism buys").
bool push_bytes(Context& c, fuse_ino_t ino, uint64_t off, const char* data, size_t n) {
  fuse_bufvec bv = FUSE_BUFVEC_INIT(n);
  bv.buf[0].mem = const_cast<char*>(data);
  const int rc = fuse_lowlevel_notify_store(c.se, ino, static_cast<off_t>(off), &bv, FUSE_BUF_NO_SPLICE);
  if (rc != 0 && log::debug_enabled()) log::debug("push of inode " + std::to_string(ino) + " failed: " + std::strerror(-rc));
  return rc == 0;
}

// Replies with the header bytes and the file runs of a spliced read: libfuse splices the runs
// from their files' page cache into the reply (or, where it cannot, reads them there).
void reply_spliced(fuse_req_t req, const vfs::OpenFile::Spliced& sp) {
  const size_t count = sp.runs.size() + (sp.head_len ? 1 : 0);
  std::vector<char> mem(sizeof(fuse_bufvec) + count * sizeof(fuse_buf));
  auto* bv = new (mem.data()) fuse_bufvec{};
  bv->count = count;
  size_t i = 0;
  if (sp.head_len) {
    bv->buf[i] = fuse_buf{};
    bv->buf[i].size = sp.head_len;
    bv->buf[i].mem = const_cast<char*>(sp.head);
    ++i;
  }
  for (const FileRun& r : sp.runs) {
    bv->buf[i] = fuse_buf{};
    bv->buf[i].size = static_cast<size_t>(r.n);
    bv->buf[i].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY);
    bv->buf[i].fd = r.fd->fd();
    bv->buf[i].pos = static_cast<off_t>(r.file_off);
    ++i;
  }
  const int rc = fuse_reply_data(req, bv, static_cast<fuse_buf_copy_flags>(0));
  if (rc != 0) log::debug(std::string("spliced reply failed: ") + std::strerror(-rc));
}

// Carries out vfs's answer (vfs/read_reply.h): its pushes, then one reply.
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, "read", ino, [&] {
    thread_local std::vector<char> buf;
    auto* f = reinterpret_cast<vfs::OpenFile*>(fi->fh);
    Context& c = ctx(req);
    vfs::ReadReply r =
        fs(req).answer_read(*f, ino, static_cast<uint64_t>(off), size, c.means, splice_buffers(size), buf);
    if (r.spliced()) {
      reply_spliced(req, r.splice());
      return;
    }
    r.push([&](uint64_t at, const char* data, size_t n) { return push_bytes(c, ino, at, data, n); });
    fuse_reply_buf(req, r.bytes(), r.size());
  });
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* f = reinterpret_cast<vfs::OpenFile*>(fi->fh);
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    // The last close of a written file: what is pending reaches the file (errors are only logged:
    // release cannot fail).
    try {
      fs(req).flush(*f, false);
    } catch (...) {
      std::string msg;
      bool logged = false;
      Place place;
      const int err = errno_of(std::current_exception(), &msg, &logged, &place);
      if (!logged) log::report(log::Level::Error, err, place, "release (inode " + std::to_string(ino) + "): " + msg);  // once
    }
  }
  ctx(req).handles.remove(f);
  fuse_reply_err(req, 0);
}

void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "flush", ino, [&] {
    // fi->flags is not set for flush: read-only open files flush nothing (OpenFile's default).
    fs(req).flush(*reinterpret_cast<vfs::OpenFile*>(fi->fh), false);
    fuse_reply_err(req, 0);
  });
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info* fi) {
  guarded(req, "fsync", ino, [&] {
    fs(req).flush(*reinterpret_cast<vfs::OpenFile*>(fi->fh), true);
    fuse_reply_err(req, 0);
  });
}

struct DirHandle {
  std::vector<vfs::DirEntry> entries;  // ".", ".." and the listing
};

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "opendir", ino, [&] {
    if ((fi->flags & O_ACCMODE) != O_RDONLY) fail(EROFS, "read-only filesystem");
    auto h = std::make_unique<DirHandle>();
    h->entries.push_back({".", ino, vfs::NodeKind::Directory});
    h->entries.push_back({"..", 0, vfs::NodeKind::Directory});
    vfs::Caller who;
    for (auto& e : fs(req).readdir(ino, caller_of(req, who))) h->entries.push_back(std::move(e));
    fi->keep_cache = fs(req).keep_listing(ino) ? 1 : 0;
    fi->cache_readdir = fi->keep_cache;
    DirHandle* p = ctx(req).handles.add(std::move(h));
    fi->fh = reinterpret_cast<uint64_t>(p);
    if (fuse_reply_open(req, fi) != 0) ctx(req).handles.remove(p);
  });
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, "readdir", ino, [&] {
    const auto* h = reinterpret_cast<const DirHandle*>(fi->fh);
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(off); i < h->entries.size(); ++i) {
      const vfs::DirEntry& e = h->entries[i];
      struct stat st;
      std::memset(&st, 0, sizeof st);
      st.st_ino = e.ino ? e.ino : FUSE_ROOT_ID;
      st.st_mode = e.kind == vfs::NodeKind::Directory ? S_IFDIR
                   : e.kind == vfs::NodeKind::Symlink ? S_IFLNK
                                                      : S_IFREG;
      const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(),
                                            &st, static_cast<off_t>(i + 1));
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  ctx(req).handles.remove(reinterpret_cast<DirHandle*>(fi->fh));
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  guarded(req, "statfs", ino, [&] {
    const vfs::FsStats s = ctx(req).vfs->statfs();
    struct statvfs st;
    std::memset(&st, 0, sizeof st);
    st.f_bsize = s.block_size;
    st.f_frsize = s.block_size;
    st.f_blocks = s.bytes / s.block_size;
    st.f_files = s.files;
    st.f_namemax = s.name_max;
    st.f_flag = ctx(req).vfs->writable() ? 0 : ST_RDONLY;
    fuse_reply_statfs(req, &st);
  });
}

// Everything that would change the tree: read-only (on rw mounts: what cannot change, EPERM).
void erofs(fuse_req_t req, const char* op, uint64_t ino) {
  const int err = fs(req).writable() ? EPERM : EROFS;
  fs(req).note_error(err);  // every error reply is counted (stats.json errors) and logged
  log::debug(std::string(op) + " (inode " + std::to_string(ino) + "): " + std::strerror(err) +
             " (the tree cannot change this way)");
  fuse_reply_err(req, err);
}
void op_mknod(fuse_req_t req, fuse_ino_t p, const char*, mode_t, dev_t) { erofs(req, "mknod", p); }
void op_unlink(fuse_req_t req, fuse_ino_t p, const char*) { erofs(req, "unlink", p); }
void op_symlink(fuse_req_t req, const char*, fuse_ino_t p, const char*) { erofs(req, "symlink", p); }
void op_rename(fuse_req_t req, fuse_ino_t p, const char*, fuse_ino_t, const char*, unsigned) { erofs(req, "rename", p); }
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t, const char*) { erofs(req, "link", ino); }
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char*, const char*, size_t, int) { erofs(req, "setxattr", ino); }
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char*) { erofs(req, "removexattr", ino); }
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int, off_t, off_t, fuse_file_info*) { erofs(req, "fallocate", ino); }

// rw mounts (vfs/writable.h): each handler calls the Vfs, which refuses with EROFS when read-only.
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  guarded(req, "setattr", ino, [&] {
    if (!fs(req).writable()) fail(EROFS, "read-only filesystem");
    // Only the size can change; times and modes are accepted and ignored (touch, cp -p).
    const vfs::Attr a = (to_set & FUSE_SET_ATTR_SIZE)
                            ? fs(req).truncate(ino, static_cast<uint64_t>(attr->st_size))
                            : fs(req).getattr(ino);
    const struct stat st = to_stat(a);
    fuse_reply_attr(req, &st, attr_timeout(req, a));
  });
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  guarded(req, "mkdir", parent, [&] {
    const fuse_ctx* c = fuse_req_ctx(req);
    vfs::Caller who;
    const fuse_entry_param e = entry_of(req, fs(req).mkdir(parent, name, mode, c->uid, c->gid, caller_of(req, who)));
    fuse_reply_entry(req, &e);
  });
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  guarded(req, "create", parent, [&] {
    const fuse_ctx* c = fuse_req_ctx(req);
    vfs::Caller who;
    auto [attr, f] = fs(req).create(parent, name, mode, c->uid, c->gid, caller_of(req, who));
    const fuse_entry_param e = entry_of(req, attr);
    fi->direct_io = 0;  // mmap must work (numpy memmap)
    fi->keep_cache = f->keep_cache;
    vfs::OpenFile* p = ctx(req).handles.add(std::move(f));
    fi->fh = reinterpret_cast<uint64_t>(p);
    if (fuse_reply_create(req, &e, fi) != 0) ctx(req).handles.remove(p);
  });
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
              fuse_file_info* fi) {
  guarded(req, "write", ino, [&] {
    auto* f = reinterpret_cast<vfs::OpenFile*>(fi->fh);
    fuse_reply_write(req, fs(req).write(*f, static_cast<uint64_t>(off), size, buf));
  });
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops o;
  std::memset(&o, 0, sizeof o);
  o.init = op_init;
  o.lookup = op_lookup;
  o.forget = op_forget;
  o.forget_multi = op_forget_multi;
  o.getattr = op_getattr;
  o.readlink = op_readlink;
  o.open = op_open;
  o.read = op_read;
  o.release = op_release;
  o.flush = op_flush;
  o.fsync = op_fsync;
  o.opendir = op_opendir;
  o.readdir = op_readdir;
  o.releasedir = op_releasedir;
  o.statfs = op_statfs;
  o.setattr = op_setattr;
  o.mknod = op_mknod;
  o.mkdir = op_mkdir;
  o.unlink = op_unlink;
  o.rmdir = op_unlink;
  o.symlink = op_symlink;
  o.rename = op_rename;
  o.link = op_link;
  o.write = op_write;
  o.create = op_create;
  o.setxattr = op_setxattr;
  o.removexattr = op_removexattr;
  o.fallocate = op_fallocate;
  return o;
}

}  // namespace

int errno_of(std::exception_ptr e, std::string* message, bool* logged, Place* place) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    *message = x.what();
    if (logged) *logged = x.logged();
    if (place) *place = x.place();
    return x.code() > 0 ? x.code() : EIO;
  } catch (const std::bad_alloc&) {
    *message = "out of memory";
    return ENOMEM;
  } catch (const std::exception& x) {
    *message = x.what();
    return EIO;
  } catch (...) {
    *message = "unknown failure";
    return EIO;
  }
}

const fuse_lowlevel_ops& operations() {
  static const fuse_lowlevel_ops ops = make_ops();
  return ops;
}

}  // namespace h5d::fusefs
