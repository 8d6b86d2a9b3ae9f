// The FUSE ceiling for benchmarks: a bare low-level FUSE filesystem serving one file, `data`,
// from memory (no decoding, no I/O), configured like h5direct (cached mode, multi-threaded
// loop). Whatever h5direct does per request costs on top of this.
// Usage: fuse_ceiling MOUNTPOINT SIZE_BYTES [READAHEAD_KB]
//   (stays in the foreground; fusermount3 -u to stop). READAHEAD_KB (root only) raises the
//   mount's read-ahead while INIT is handled, the way h5direct does by default as root.
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include "fuse_readahead.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

static std::vector<char> g_data;
static std::string g_mnt;
static unsigned g_readahead_kb = 0;

static void op_init(void*, fuse_conn_info* conn) {
  if (g_readahead_kb == 0) return;
  conn->max_readahead = g_readahead_kb * 1024u;
  set_fuse_readahead(g_mnt, g_readahead_kb);
}

static void fill_attr(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = ino;
  if (ino == 1) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(g_data.size());
  }
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != 1 || std::strcmp(name, "data") != 0) return (void)fuse_reply_err(req, ENOENT);
  fuse_entry_param e{};
  e.ino = 2;
  e.attr_timeout = e.entry_timeout = 3600;
  fill_attr(2, &e.attr);
  fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st;
  fill_attr(ino, &st);
  fuse_reply_attr(req, &st, 3600);
}

static void op_open(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info*) {
  size_t n = static_cast<size_t>(off) >= g_data.size() ? 0 : std::min(size, g_data.size() - static_cast<size_t>(off));
  fuse_reply_buf(req, g_data.data() + off, n);
}

static void op_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info*) {
  char buf[512];
  size_t len = 0;
  struct stat st;
  const char* names[] = {".", "..", "data"};
  for (off_t i = off; i < 3; ++i) {
    fill_attr(i == 2 ? 2 : 1, &st);
    size_t n = fuse_add_direntry(req, buf + len, sizeof buf - len, names[i], &st, i + 1);
    if (n > sizeof buf - len) break;
    len += n;
  }
  fuse_reply_buf(req, buf, std::min(len, size));
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MOUNTPOINT SIZE_BYTES\n", argv[0]);
    return 2;
  }
  g_data.resize(std::strtoull(argv[2], nullptr, 10));
  g_mnt = argv[1];
  if (argc > 3) g_readahead_kb = static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10));
  for (size_t i = 0; i < g_data.size(); i += 4096) g_data[i] = static_cast<char>(i >> 12);
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.open = op_open;
  ops.read = op_read;
  ops.readdir = op_readdir;
  char arg0[] = "fuse_ceiling", o[] = "-o", opts[] = "ro,default_permissions,fsname=ceiling,subtype=ceiling";
  char* fargv[] = {arg0, o, opts};
  fuse_args args = FUSE_ARGS_INIT(3, fargv);
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
  if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[1]) != 0) return 1;
  fuse_loop_config cfg{};
  cfg.clone_fd = 0;
  cfg.max_idle_threads = 16;
  int rc = fuse_session_loop_mt(se, &cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc ? 1 : 0;
}
