// slowfs: a read-only passthrough FUSE filesystem that makes this machine's fast local disk behave
// like cold parallel storage (GPFS, dCache): every READ request that reaches it costs a round trip
// plus its size over one stream's bandwidth, and many requests in flight overlap freely. h5py,
// a Python direct reader and h5direct can then all be benchmarked reading through the same slow
// source (docs/benchmarks.md, "Slow-storage emulator: bench/slowfs").
//
// Usage: slowfs SOURCE_DIR MOUNTPOINT [-f] [--latency-ms X] [--bandwidth-mbs Y]
//          [--aggregate-mbs Z] [--threads N] [--readahead-kb K] [--meta-latency-ms M]
//          [--no-keep-cache] [--allow-other]
// Counters: read MOUNTPOINT/.slowfs_stats (one JSON object); reading MOUNTPOINT/.slowfs_stats_reset
// returns the same and then zeroes them. Neither name is listed by readdir.
// Self-contained: libfuse3 only (never core/).
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <linux/fuse.h>  // fuse_in_header, FUSE_INTERRUPT

#include "fuse_readahead.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace {

// ---- options ------------------------------------------------------------------------------------

struct Options {
  std::string source, mountpoint;
  bool foreground = false;
  double latency_ms = 2.0;       // per READ request
  double bandwidth_mbs = 400.0;  // per request, MB = 1e6 bytes; 0: no transfer cost
  double aggregate_mbs = 0.0;    // sum over all requests; 0: no cap
  double meta_latency_ms = 0.0;  // lookup, getattr, open
  unsigned threads = 128;
  long readahead_kb = -1;  // -1: the kernel's default
  bool keep_cache = true;
  bool allow_other = false;
  // Reads starting at or past hang_from in files named `hang` never finish (until unmount): data
  // on tape behind dCache, a stuck server. The metadata before hang_from stays readable.
  std::string hang;
  uint64_t hang_from = 0;
};

const char* kUsage =
    "usage: slowfs SOURCE_DIR MOUNTPOINT [-f] [--latency-ms X] [--bandwidth-mbs Y]\n"
    "              [--aggregate-mbs Z] [--threads N] [--readahead-kb K] [--meta-latency-ms M]\n"
    "              [--no-keep-cache] [--allow-other]\n"
    "A read-only passthrough of SOURCE_DIR where every read request costs\n"
    "latency + size / bandwidth, and up to N requests are served at once.\n"
    "  -f                   stay in the foreground (default: daemon; stop with fusermount3 -u)\n"
    "  --latency-ms X       per read request, fractions allowed (default 2)\n"
    "  --bandwidth-mbs Y    one request's bandwidth, MB/s of 1e6 bytes; 0 = unlimited (default 400)\n"
    "  --aggregate-mbs Z    cap on all requests together, MB/s; 0 = no cap (default 0)\n"
    "  --threads N          requests served at once (default 128)\n"
    "  --readahead-kb K     the mount's read-ahead (kernel default 128 KiB; above that needs root)\n"
    "  --meta-latency-ms M  delay of lookup, getattr and open (default 0)\n"
    "  --hang NAME[:OFFSET] reads of files named NAME (in any directory) starting at or past OFFSET\n"
    "                       (default 0) never return until the filesystem is unmounted: data on\n"
    "                       tape behind dCache, a stuck server\n"
    "  --no-keep-cache      drop a file's page cache at each open (default: keep it across opens)\n"
    "  --allow-other        let other users read the mount\n"
    "Counters: cat MOUNTPOINT/.slowfs_stats (JSON); MOUNTPOINT/.slowfs_stats_reset also zeroes them.\n";

bool parse_number(const char* s, double& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(v >= 0.0) || v > 1e12) return false;
  out = v;
  return true;
}

// Returns "" or the error.
std::string parse_args(int argc, char** argv, Options& o) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](double& out) -> std::string {
      if (i + 1 >= argc || !parse_number(argv[i + 1], out)) return a + " needs a non-negative number";
      ++i;
      return "";
    };
    std::string err;
    double v = 0;
    if (a == "-f") {
      o.foreground = true;
    } else if (a == "-h" || a == "--help") {
      return "help";
    } else if (a == "--latency-ms") {
      err = value(o.latency_ms);
    } else if (a == "--bandwidth-mbs") {
      err = value(o.bandwidth_mbs);
    } else if (a == "--aggregate-mbs") {
      err = value(o.aggregate_mbs);
    } else if (a == "--meta-latency-ms") {
      err = value(o.meta_latency_ms);
    } else if (a == "--hang") {
      if (i + 1 >= argc) {
        err = "--hang needs NAME[:OFFSET]";
      } else {
        std::string h = argv[++i];
        const size_t colon = h.rfind(':');
        o.hang = h.substr(0, colon);
        if (colon != std::string::npos) o.hang_from = std::strtoull(h.c_str() + colon + 1, nullptr, 10);
        if (o.hang.empty()) err = "--hang needs NAME[:OFFSET]";
      }
    } else if (a == "--threads") {
      err = value(v);
      if (err.empty() && (v < 1 || v > 4096 || v != static_cast<unsigned>(v))) err = "--threads must be 1-4096";
      o.threads = static_cast<unsigned>(v);
    } else if (a == "--readahead-kb") {
      err = value(v);
      if (err.empty() && (v > 1048576 || v != static_cast<long>(v))) err = "--readahead-kb must be a whole number <= 1048576";
      o.readahead_kb = static_cast<long>(v);
    } else if (a == "--no-keep-cache") {
      o.keep_cache = false;
    } else if (a == "--allow-other") {
      o.allow_other = true;
    } else if (!a.empty() && a[0] == '-') {
      return "unknown option " + a;
    } else {
      positional.push_back(a);
    }
    if (!err.empty()) return err;
  }
  if (positional.size() != 2) return "need SOURCE_DIR and MOUNTPOINT";
  o.source = positional[0];
  o.mountpoint = positional[1];
  return "";
}

// ---- time ---------------------------------------------------------------------------------------

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_until(int64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = deadline_ns / 1000000000;
  ts.tv_nsec = deadline_ns % 1000000000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// ---- state --------------------------------------------------------------------------------------

struct Node {
  std::string path;  // relative to the source ("." for the root)
};

constexpr fuse_ino_t kStatsIno = 2, kStatsResetIno = 3, kFirstIno = 4;
const char* const kStatsName = ".slowfs_stats";
const char* const kStatsResetName = ".slowfs_stats_reset";

void atomic_max(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

struct Counters {
  std::atomic<uint64_t> reads{0}, bytes{0}, bytes_requested{0}, read_errors{0};
  std::atomic<uint64_t> max_in_flight{0}, max_request_bytes{0}, emulated_ns{0};
  std::atomic<uint64_t> lookups{0}, getattrs{0}, opens{0}, readdirs{0}, hung{0};
  void reset() {
    for (auto* c : {&reads, &bytes, &bytes_requested, &read_errors, &max_in_flight, &max_request_bytes,
                    &emulated_ns, &lookups, &getattrs, &opens, &readdirs, &hung})
      c->store(0);
  }
};

struct State {
  Options opt;
  int src_fd = -1;
  std::string mnt_real;
  int64_t latency_ns = 0, meta_latency_ns = 0;
  double ns_per_byte = 0.0;      // per request
  double agg_ns_per_byte = 0.0;  // aggregate cap
  std::mutex agg_mu;
  int64_t agg_next_free = 0;  // when the shared pipe is next free (virtual time)
  // --hang: the descriptors of the files whose reads hang; the workers serving such reads wait
  // here until the loop ends (libfuse cancels its workers then).
  std::mutex hang_mu;
  std::condition_variable hang_cv;
  bool stopping = false;
  fuse_session* se = nullptr;

  std::mutex nodes_mu;
  std::vector<Node> nodes;  // index = ino - kFirstIno; never freed (ids stable per mount)
  std::unordered_map<std::string, fuse_ino_t> by_path;

  std::atomic<uint64_t> in_flight{0};
  Counters c;
};

State g;

// One open file. The kernel may answer a READ's interruption by releasing the file while the READ
// is still served here (seen under the cold matrix: a stats file freed under its reader, a source
// descriptor closed and reused by another open under a pread): so a handle is shared by the
// table and by every request using it, and its descriptor closes when the last one lets go.
struct Handle {
  int fd = -1;              // the source file; -1 for a stats file
  bool hangs = false;       // --hang names it
  std::string stats;        // a stats file's snapshot, taken at open
  ~Handle() {
    if (fd >= 0) ::close(fd);
  }
};

// Open files and directories by id: shared by the table and by every request using one, so a
// request still served when the kernel releases its file or directory keeps what it opened (the
// last holder closes it). Ids are never reused in a mount, so a late request for a released one
// finds nothing rather than another's state.
template <class T>
class HandleTable {
 public:
  uint64_t add(std::shared_ptr<T> h) {
    static std::atomic<uint64_t> next{1};  // one sequence for every table
    const uint64_t id = next.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu_);
    map_.emplace(id, std::move(h));
    return id;
  }
  std::shared_ptr<T> find(uint64_t id) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(id);
    return it == map_.end() ? nullptr : it->second;
  }
  void drop(uint64_t id) {
    std::shared_ptr<T> last;  // destroyed outside the lock
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return;
    last = std::move(it->second);
    map_.erase(it);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<T>> map_;
};

HandleTable<const Handle> handles;

// The node's relative path, or false for an unknown inode.
bool path_of(fuse_ino_t ino, std::string& out) {
  if (ino == FUSE_ROOT_ID) {
    out = ".";
    return true;
  }
  std::lock_guard<std::mutex> lk(g.nodes_mu);
  if (ino < kFirstIno || ino - kFirstIno >= g.nodes.size()) return false;
  out = g.nodes[ino - kFirstIno].path;
  return true;
}

fuse_ino_t ino_for(const std::string& path) {
  if (path == ".") return FUSE_ROOT_ID;
  std::lock_guard<std::mutex> lk(g.nodes_mu);
  auto it = g.by_path.find(path);
  if (it != g.by_path.end()) return it->second;
  const fuse_ino_t ino = kFirstIno + g.nodes.size();
  g.nodes.push_back(Node{path});
  g.by_path.emplace(path, ino);
  return ino;
}

int stat_path(const std::string& path, struct stat* st) {
  const int r = path == "." ? ::fstat(g.src_fd, st) : ::fstatat(g.src_fd, path.c_str(), st, AT_SYMLINK_NOFOLLOW);
  return r == 0 ? 0 : errno;
}

// ---- the virtual stats files ----------------------------------------------------------------------

std::string stats_json(bool reset) {
  char buf[1024];
  auto ld = [](std::atomic<uint64_t>& a) { return static_cast<unsigned long long>(a.load()); };
  std::snprintf(buf, sizeof buf,
                "{\"reads\": %llu, \"bytes\": %llu, \"bytes_requested\": %llu, \"read_errors\": %llu, "
                "\"max_in_flight\": %llu, \"in_flight\": %llu, \"max_request_bytes\": %llu, "
                "\"emulated_s\": %.6f, \"lookups\": %llu, \"getattrs\": %llu, \"opens\": %llu, "
                "\"readdirs\": %llu, \"hung\": %llu, \"latency_ms\": %g, \"bandwidth_mbs\": %g, \"aggregate_mbs\": %g, "
                "\"meta_latency_ms\": %g, \"threads\": %u, \"readahead_kb\": %ld, \"keep_cache\": %s}\n",
                ld(g.c.reads), ld(g.c.bytes), ld(g.c.bytes_requested), ld(g.c.read_errors), ld(g.c.max_in_flight),
                ld(g.in_flight), ld(g.c.max_request_bytes), double(g.c.emulated_ns.load()) / 1e9, ld(g.c.lookups),
                ld(g.c.getattrs), ld(g.c.opens), ld(g.c.readdirs), ld(g.c.hung), g.opt.latency_ms, g.opt.bandwidth_mbs,
                g.opt.aggregate_mbs, g.opt.meta_latency_ms, g.opt.threads, g.opt.readahead_kb,
                g.opt.keep_cache ? "true" : "false");
  if (reset) g.c.reset();
  return buf;
}

void stats_attr(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = 0;  // its content changes: served with direct_io, read until EOF
  st->st_uid = ::getuid();
  st->st_gid = ::getgid();
}

// ---- operations ---------------------------------------------------------------------------------

constexpr double kAttrTimeout = 1.0;  // seconds; the source may be rewritten between benchmark runs

void meta_delay() {
  if (g.meta_latency_ns > 0) sleep_until(now_ns() + g.meta_latency_ns);
}

void op_init(void*, fuse_conn_info* conn) {
  // Let the kernel's async read-ahead keep as many requests in flight as there are threads
  // (FUSE's default is 12 background requests, congested at 9).
  const unsigned bg = std::min(g.opt.threads, 65535u);
  conn->max_background = bg;
  conn->congestion_threshold = bg;
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_SPLICE_READ |
                                       FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_WRITEBACK_CACHE);
  if (g.opt.readahead_kb < 0) return;
  // The kernel sets the mount's read-ahead to min(its current value, this reply's max_readahead):
  // above its default (128 KiB) the sysfs value must be raised before INIT is answered.
  conn->max_readahead = static_cast<unsigned>(g.opt.readahead_kb) * 1024u;
  const std::string err = set_fuse_readahead(g.mnt_real, static_cast<unsigned>(g.opt.readahead_kb));
  if (!err.empty() && g.opt.readahead_kb > 128)
    std::fprintf(stderr, "slowfs: warning: %s: read-ahead stays at most 128 KiB\n", err.c_str());
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  g.c.lookups++;
  meta_delay();
  fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  if (parent == FUSE_ROOT_ID && (!std::strcmp(name, kStatsName) || !std::strcmp(name, kStatsResetName))) {
    e.ino = !std::strcmp(name, kStatsName) ? kStatsIno : kStatsResetIno;
    stats_attr(e.ino, &e.attr);
    fuse_reply_entry(req, &e);  // timeouts 0: asked again each time
    return;
  }
  std::string dir;
  if (!path_of(parent, dir)) return (void)fuse_reply_err(req, ESTALE);
  std::string path;
  if (!std::strcmp(name, ".")) {
    path = dir;
  } else if (!std::strcmp(name, "..")) {
    const size_t slash = dir.rfind('/');
    path = dir == "." ? "." : slash == std::string::npos ? "." : dir.substr(0, slash);
  } else if (std::strchr(name, '/') || !*name) {
    return (void)fuse_reply_err(req, EINVAL);
  } else {
    path = dir == "." ? std::string(name) : dir + "/" + name;
  }
  if (path.size() >= PATH_MAX) return (void)fuse_reply_err(req, ENAMETOOLONG);
  if (int err = stat_path(path, &e.attr)) {
    if (err == ENOENT) {  // cache the absence like an entry
      e.ino = 0;
      e.entry_timeout = kAttrTimeout;
      return (void)fuse_reply_entry(req, &e);
    }
    return (void)fuse_reply_err(req, err);
  }
  e.ino = ino_for(path);
  e.generation = 1;
  e.attr_timeout = e.entry_timeout = kAttrTimeout;
  fuse_reply_entry(req, &e);
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  g.c.getattrs++;
  meta_delay();
  struct stat st;
  if (ino == kStatsIno || ino == kStatsResetIno) {
    stats_attr(ino, &st);
    return (void)fuse_reply_attr(req, &st, 0);
  }
  std::string path;
  if (!path_of(ino, path)) return (void)fuse_reply_err(req, ESTALE);
  if (int err = stat_path(path, &st)) return (void)fuse_reply_err(req, err);
  fuse_reply_attr(req, &st, kAttrTimeout);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  std::string path;
  if (!path_of(ino, path)) return (void)fuse_reply_err(req, ESTALE);
  std::vector<char> buf(PATH_MAX + 1);
  const ssize_t n = ::readlinkat(g.src_fd, path.c_str(), buf.data(), buf.size() - 1);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  buf[static_cast<size_t>(n)] = '\0';
  fuse_reply_readlink(req, buf.data());
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_CREAT)))
    return (void)fuse_reply_err(req, EROFS);
  auto h = std::make_shared<Handle>();
  if (ino == kStatsIno || ino == kStatsResetIno) {
    h->stats = stats_json(ino == kStatsResetIno);
    fi->direct_io = 1;
  } else {
    g.c.opens++;
    meta_delay();
    std::string path;
    if (!path_of(ino, path)) return (void)fuse_reply_err(req, ESTALE);
    h->fd = ::openat(g.src_fd, path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    if (h->fd < 0) return (void)fuse_reply_err(req, errno);
    if (!g.opt.hang.empty()) {
      const size_t slash = path.rfind('/');
      h->hangs = path.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos, g.opt.hang) == 0;
    }
    fi->keep_cache = g.opt.keep_cache ? 1 : 0;
  }
  fi->fh = handles.add(std::move(h));
  if (fuse_reply_open(req, fi) != 0) handles.drop(fi->fh);  // the open was interrupted
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  handles.drop(fi->fh);
  fuse_reply_err(req, 0);
}

// One request's buffer per worker thread, grown to the largest request it served.
thread_local std::unique_ptr<char[]> t_buf;
thread_local size_t t_buf_size = 0;

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  const std::shared_ptr<const Handle> h = handles.find(fi->fh);
  if (!h) return (void)fuse_reply_err(req, EBADF);
  if (ino == kStatsIno || ino == kStatsResetIno) {
    const std::string& s = h->stats;
    const size_t start = off < 0 ? s.size() : std::min(s.size(), static_cast<size_t>(off));
    return (void)fuse_reply_buf(req, s.data() + start, std::min(size, s.size() - start));
  }
  if (h->hangs && static_cast<uint64_t>(off) >= g.opt.hang_from) {
    g.c.hung++;
    // Until the session ends (unmount, SIGTERM): then the loop joins its workers, so they stop.
    std::unique_lock<std::mutex> lk(g.hang_mu);
    while (!g.stopping && !fuse_session_exited(g.se)) g.hang_cv.wait_for(lk, std::chrono::milliseconds(100));
    return (void)fuse_reply_err(req, EIO);
  }
  const int64_t arrival = now_ns();
  const uint64_t depth = ++g.in_flight;
  atomic_max(g.c.max_in_flight, depth);
  atomic_max(g.c.max_request_bytes, size);
  if (t_buf_size < size) {
    t_buf.reset(new (std::nothrow) char[size]);
    t_buf_size = t_buf ? size : 0;
  }
  size_t got = 0;
  int err = t_buf ? 0 : ENOMEM;
  while (!err && got < size) {  // until the request is full or EOF (a short reply only at EOF)
    const ssize_t n = ::pread(h->fd, t_buf.get() + got, size - got, off + static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
    } else if (n == 0) {
      break;
    } else {
      got += static_cast<size_t>(n);
    }
  }
  // The emulated cost, measured from the request's arrival (the local disk's own time hides in it).
  int64_t deadline = arrival + g.latency_ns + static_cast<int64_t>(double(got) * g.ns_per_byte);
  if (g.agg_ns_per_byte > 0 && got > 0) {
    // A shared pipe: each request's transfer takes a slot of got / Z after its latency; slots never
    // overlap, so all requests together never exceed Z.
    std::lock_guard<std::mutex> lk(g.agg_mu);
    const int64_t start = std::max(arrival + g.latency_ns, g.agg_next_free);
    g.agg_next_free = start + static_cast<int64_t>(double(got) * g.agg_ns_per_byte);
    deadline = std::max(deadline, g.agg_next_free);
  }
  sleep_until(deadline);
  g.c.emulated_ns += static_cast<uint64_t>(deadline - arrival);
  g.c.reads++;
  g.c.bytes_requested += size;
  if (err) g.c.read_errors++;
  if (err && got == 0) {  // after some bytes an error returns those bytes, as pread(2) does
    --g.in_flight;
    return (void)fuse_reply_err(req, err);
  }
  g.c.bytes += got;
  --g.in_flight;
  fuse_reply_buf(req, t_buf.get(), got);
}

// An open directory. Kept in the handle table like an open file, for the same reason: a
// READDIR still served when its directory was released locked a freed Dir's mutex (the
// emulator's "malloc(): unaligned tcache chunk detected" under the cold matrix, caught in gdb in
// op_opendir's allocation of the next Dir of that size).
struct Dir {
  std::mutex mu;
  DIR* dp = nullptr;
  off_t pos = 0;  // the offset that the next readdir() returns
  struct dirent* pending = nullptr;  // read but not yet returned (did not fit)
  ~Dir() {
    if (dp) ::closedir(dp);
  }
};

HandleTable<Dir> dirs;

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::string path;
  if (!path_of(ino, path)) return (void)fuse_reply_err(req, ESTALE);
  const int fd = ::openat(g.src_fd, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  auto d = std::make_shared<Dir>();
  d->dp = ::fdopendir(fd);
  if (!d->dp) {
    const int e = errno;
    ::close(fd);
    return (void)fuse_reply_err(req, e);
  }
  fi->fh = dirs.add(std::move(d));
  if (fuse_reply_open(req, fi) != 0) dirs.drop(fi->fh);  // the request was interrupted
}

void op_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  g.c.readdirs++;
  const std::shared_ptr<Dir> dir = dirs.find(fi->fh);
  if (!dir) return (void)fuse_reply_err(req, EBADF);
  Dir& d = *dir;
  std::lock_guard<std::mutex> lk(d.mu);
  if (off != d.pos) {
    ::seekdir(d.dp, off);
    d.pending = nullptr;
    d.pos = off;
  }
  std::vector<char> buf(std::min<size_t>(size, 1 << 20));
  size_t len = 0;
  while (true) {
    struct dirent* e = d.pending;
    if (!e) {
      errno = 0;
      e = ::readdir(d.dp);
      if (!e) {
        if (errno && len == 0) return (void)fuse_reply_err(req, errno);
        break;
      }
    }
    struct stat st;
    std::memset(&st, 0, sizeof st);
    st.st_ino = e->d_ino;
    st.st_mode = static_cast<mode_t>(e->d_type) << 12;
    const size_t n = fuse_add_direntry(req, buf.data() + len, buf.size() - len, e->d_name, &st, e->d_off);
    if (n > buf.size() - len) {
      d.pending = e;
      break;
    }
    d.pending = nullptr;
    len += n;
    d.pos = e->d_off;
  }
  fuse_reply_buf(req, buf.data(), len);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  dirs.drop(fi->fh);  // closed here, or by a readdir still holding it
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs sv;
  if (::fstatvfs(g.src_fd, &sv) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_statfs(req, &sv);
}

void op_access(fuse_req_t req, fuse_ino_t, int mask) { fuse_reply_err(req, (mask & W_OK) ? EROFS : 0); }

std::string escape_mountinfo(const std::string& s) {  // how /proc/self/mountinfo spells a path
  std::string out;
  for (char ch : s) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\\') {
      char b[8];
      std::snprintf(b, sizeof b, "\\%03o", static_cast<unsigned char>(ch));
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

// The session loop: `threads` workers, each receiving and answering one request at a time, all
// reading the one /dev/fuse descriptor (as libfuse's multithreaded loop does, without clone_fd).
// Not libfuse's loop because of FUSE_INTERRUPT: libfuse 3.14 tracks every request on a shared
// list for the interrupts it may get, and under the cold matrix (h5direct daemons exiting with
// reads in flight send interrupts for them) the emulator died twice of glibc heap corruption
// ("malloc(): unsorted double linked list corrupted") with its own handles already safe. The
// kernel allows a filesystem to ignore interrupts (the request completes normally), which is
// what emulated storage does anyway: they are dropped here, before libfuse sees them.
// Returns 0, or the receive error that ended it; `stuck`: workers still blocked after unmounting
// (a lazy unmount with files open keeps the connection): then the caller must not destroy the
// session, and exits.
int serve(fuse_session* se, unsigned threads, bool& stuck) {
  static std::atomic<int> failure{0};
  static std::atomic<unsigned> done{0};
  auto worker = [se] {
    fuse_buf buf{};
    while (!fuse_session_exited(se)) {
      const int res = fuse_session_receive_buf(se, &buf);
      if (res == -EINTR) continue;
      if (res <= 0) {  // 0, -ENODEV, -ECONNABORTED: unmounted; another error: over too
        if (res < 0 && res != -ENODEV && res != -ECONNABORTED) failure.store(res);
        fuse_session_exit(se);
        break;
      }
      if (!(buf.flags & FUSE_BUF_IS_FD) && static_cast<size_t>(res) >= sizeof(fuse_in_header) &&
          reinterpret_cast<const fuse_in_header*>(buf.mem)->opcode == FUSE_INTERRUPT)
        continue;
      fuse_session_process_buf(se, &buf);
    }
    std::free(buf.mem);
    done.fetch_add(1);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);
  // A signal (SIGTERM, SIGINT: fuse_set_signal_handlers) only marks the session exited; the
  // workers still block reading /dev/fuse: unmounting ends those reads (-ENODEV).
  while (!fuse_session_exited(se)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lk(g.hang_mu);
    g.stopping = true;
  }
  g.hang_cv.notify_all();
  fuse_session_unmount(se);
  for (int i = 0; i < 50 && done.load() < threads; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stuck = done.load() < threads;
  for (std::thread& t : pool) {
    if (stuck)
      t.detach();
    else
      t.join();
  }
  return failure.load();
}

int die(const std::string& msg) {
  std::fprintf(stderr, "slowfs: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string perr = parse_args(argc, argv, g.opt);
  if (perr == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!perr.empty()) {
    std::fprintf(stderr, "slowfs: %s\n%s", perr.c_str(), kUsage);
    return 2;
  }
  char src_real[PATH_MAX], mnt_real[PATH_MAX];
  if (!::realpath(g.opt.source.c_str(), src_real)) return die("source " + g.opt.source + ": " + std::strerror(errno));
  if (!::realpath(g.opt.mountpoint.c_str(), mnt_real))
    return die("mountpoint " + g.opt.mountpoint + ": " + std::strerror(errno));
  const std::string src = src_real, mnt = mnt_real;
  if (mnt == src || (mnt.size() > src.size() && mnt.compare(0, src.size(), src) == 0 &&
                     (src == "/" || mnt[src.size()] == '/')))
    return die("the mountpoint " + mnt + " lies inside the source " + src + " (it would read itself)");
  g.src_fd = ::open(src_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g.src_fd < 0) return die("source " + src + ": " + std::strerror(errno) + " (must be a directory)");
  g.mnt_real = escape_mountinfo(mnt);
  g.latency_ns = static_cast<int64_t>(g.opt.latency_ms * 1e6);
  g.meta_latency_ns = static_cast<int64_t>(g.opt.meta_latency_ms * 1e6);
  g.ns_per_byte = g.opt.bandwidth_mbs > 0 ? 1e3 / g.opt.bandwidth_mbs : 0.0;  // 1e9 ns / (Y * 1e6 B)
  g.agg_ns_per_byte = g.opt.aggregate_mbs > 0 ? 1e3 / g.opt.aggregate_mbs : 0.0;

  // One descriptor per open file: allow as many as the hard limit does.
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }

  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.getattr = op_getattr;
  ops.readlink = op_readlink;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.releasedir = op_releasedir;
  ops.statfs = op_statfs;
  ops.access = op_access;

  std::string mount_opts = "ro,default_permissions,fsname=slowfs,subtype=slowfs";
  if (g.opt.allow_other) mount_opts += ",allow_other";
  std::vector<std::string> store = {argv[0], "-o", mount_opts};
  std::vector<char*> fargv;
  for (auto& s : store) fargv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), fargv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
  if (!se) return die("cannot create the FUSE session");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return die("cannot install signal handlers");
  }
  if (fuse_session_mount(se, mnt_real) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return die("cannot mount on " + mnt);
  }
  if (fuse_daemonize(g.opt.foreground ? 1 : 0) != 0) {
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return die("cannot daemonize");
  }
  g.se = se;
  bool stuck = false;
  const int rc = serve(se, g.opt.threads, stuck);
  fuse_remove_signal_handlers(se);
  if (stuck) {
    std::fprintf(stderr, "slowfs: some workers still wait for requests after unmounting; exiting\n");
    std::fflush(stderr);
    ::_exit(rc < 0 ? 1 : 0);
  }
  fuse_session_destroy(se);
  if (g.opt.foreground) std::fprintf(stderr, "slowfs: %s", stats_json(false).c_str());
  return rc < 0 ? 1 : 0;
}
