// The virtual tree without FUSE: lazy providers, inode table, naming rules, array files over an
// in-memory array, the control directory, the sequential prefetcher, sidecar dtypes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/error.h"
#include "vfs/npy.h"
#include "vfs/read_policy.h"
#include "vfs/sidecar.h"
#include "vfs/tree.h"
#include "vfs/vfs.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using h5d::test::CoreOptions;
using h5d::test::TestCore;
using namespace h5d::vfs;

namespace {

class CountingProvider final : public DirProvider {
 public:
  CountingProvider(std::vector<ChildEntry> c, std::atomic<int>& calls, int fail_first = 0)
      : c_(std::move(c)), calls_(calls), fail_(fail_first) {}
  std::vector<ChildEntry> list() override {
    ++calls_;
    if (fail_ > 0) {
      --fail_;
      fail(EIO, "listing failed on purpose");
    }
    return c_;
  }

 private:
  std::vector<ChildEntry> c_;
  std::atomic<int>& calls_;
  int fail_;
};

NodeMeta meta(mode_t perm) {
  NodeMeta m;
  m.perm = perm;
  return m;
}

std::string tmpdir(const std::string& name) {
  const char* base = std::getenv("H5D_TEST_TMP");
  std::string d = std::string(base ? base : "/tmp") + "/" + name + "." + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + d + "' && mkdir -p '" + d + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return d;
}

void write_file(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary) << content;
  ::chmod(path.c_str(), mode);
}

const std::string kSig("\x89HDF\r\n\x1a\n", 8);

CoreOptions small_engine() {
  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 16 << 20;
  return o;
}

}  // namespace

TEST_CASE("a directory lists its provider once, sorted, without bad or duplicate names", "[vfs]") {
  std::atomic<int> calls{0};
  auto f = make_text_file([] { return std::string("x"); }, meta(0444));
  std::vector<ChildEntry> c = {{"b", f}, {"a", make_text_file([] { return std::string(); }, meta(0444))},
                               {"", f}, {".", f}, {"..", f}, {"x/y", f}, {"a", f}, {"n", nullptr}};
  auto dir = std::make_shared<DirNode>(meta(0555), std::make_unique<CountingProvider>(c, calls));
  InodeTable table(dir);
  CHECK(dir->ino() == 1);
  auto l = dir->listing(table);
  REQUIRE(l->entries.size() == 2);
  CHECK(l->entries[0].name == "a");
  CHECK(l->entries[1].name == "b");
  CHECK(l->entries[0].node != f);  // the first "a" wins
  CHECK(dir->find(table, "b") == f);
  CHECK(dir->find(table, "zz") == nullptr);
  CHECK(calls == 1);
  const uint64_t ino_b = f->ino();
  CHECK(ino_b > 1);
  CHECK(table.get(ino_b) == f);
  CHECK(table.get(0) == nullptr);
  CHECK(table.get(999) == nullptr);
  dir->listing(table);
  CHECK(f->ino() == ino_b);  // stable
  CHECK(calls == 1);
}

TEST_CASE("a failed listing is retried on the next access", "[vfs]") {
  std::atomic<int> calls{0};
  auto dir = std::make_shared<DirNode>(
      meta(0555), std::make_unique<CountingProvider>(
                      std::vector<ChildEntry>{{"a", make_text_file([] { return std::string(); }, meta(0444))}},
                      calls, 1));
  InodeTable table(dir);
  CHECK_THROWS_AS(dir->listing(table), Error);
  CHECK(dir->listing(table)->entries.size() == 1);
  CHECK(calls == 2);
}

TEST_CASE("dataset names: groups keep theirs, datasets give way with ~ds", "[vfs]") {
  std::set<std::string> taken = {"a.npy", "g"};
  auto is_taken = [&](const std::string& n) { return taken.count(n) > 0; };
  CHECK(dataset_stem("b", is_taken) == "b");
  CHECK(dataset_stem("a", is_taken) == "a~ds");
  CHECK(dataset_stem("g", is_taken) == "g");  // g.npy etc. are free
  taken.insert("a~ds.json");
  CHECK(dataset_stem("a", is_taken).empty());
}

TEST_CASE("permissions mirror the source without write bits", "[vfs]") {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  st.st_mode = S_IFREG | 0640;
  st.st_uid = 12;
  st.st_gid = 34;
  CHECK(file_meta(st).perm == 0440);
  CHECK(file_meta(st).uid == 12);
  CHECK(file_meta(st).gid == 34);
  CHECK(dir_meta_of_file(st).perm == 0550);
  st.st_mode = S_IFREG | 0604;
  CHECK(dir_meta_of_file(st).perm == 0505);
  st.st_mode = S_IFDIR | 0775;
  CHECK(dir_meta(st).perm == 0555);
  st.st_mode = S_IFREG | 0777;
  CHECK(file_meta(st).perm == 0444);
}

TEST_CASE("access is decided as the kernel would: owner, then group, then other bits", "[vfs]") {
  Caller c;
  c.uid = 1000;
  c.gid = 100;
  c.groups = {200};
  CHECK(permits(c, 1000, 0, 0400, R_OK));
  CHECK_FALSE(permits(c, 1000, 100, 0044, R_OK));  // the owner gets the owner bits, not the group's
  CHECK(permits(c, 1, 200, 0040, R_OK));          // a supplementary group
  CHECK_FALSE(permits(c, 1, 300, 0604, R_OK | X_OK));
  CHECK(permits(c, 1, 300, 0005, R_OK | X_OK));
  Caller root;
  CHECK(permits(root, 1, 1, 0000, R_OK | X_OK));
  CHECK(perm_by_rule(MetaRule::File, 0640) == 0440);
  CHECK(perm_by_rule(MetaRule::DirOfFileWritable, 0640) == 0750);
  CHECK(perm_by_rule(MetaRule::DirWritable, 0751) == 0751);
}

TEST_CASE("check_access walks every directory of the source's path and follows chmod", "[vfs]") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root (files owned by others)");
    return;
  }
  const std::string d = tmpdir("access");
  REQUIRE(::chmod(d.c_str(), 0755) == 0);
  const std::string priv = d + "/priv", f = priv + "/f.h5";
  REQUIRE(::mkdir(priv.c_str(), 0700) == 0);
  { std::ofstream(f) << "x"; }
  REQUIRE(::chmod(f.c_str(), 0644) == 0);
  struct stat st;
  REQUIRE(::stat(f.c_str(), &st) == 0);
  const NodeMeta m = source_meta(f, st, MetaRule::File);
  Caller other;
  other.uid = 61010;
  other.gid = 61010;
  struct stat dst;
  REQUIRE(::stat(d.c_str(), &dst) == 0);
  try {
    check_access(other, source_meta(d, dst, MetaRule::Dir), X_OK);
  } catch (const Error&) {
    WARN("skipped: other users cannot reach " + d + " (set H5D_TEST_TMP)");
    return;
  }
  try {
    check_access(other, m, 0);
    FAIL("a 0700 directory on the way let another user through");
  } catch (const Error& e) {
    CHECK(e.code() == EACCES);
    CHECK(std::string(e.what()).find(priv) != std::string::npos);
  }
  CHECK_THROWS_AS(check_reach(other, m), Error);  // not even its mode and owner
  REQUIRE(::chmod(priv.c_str(), 0711) == 0);  // search only: the file is reachable
  CHECK_NOTHROW(check_access(other, m, 0));
  REQUIRE(::chmod(f.c_str(), 0600) == 0);     // and now no longer readable
  CHECK_THROWS_AS(check_access(other, m, 0), Error);
  CHECK_NOTHROW(check_reach(other, m));       // but reachable: ls -l shows its mode and owner
  CHECK(current_meta(m).perm == 0400);
  REQUIRE(::chown(f.c_str(), 61010, 61010) == 0);
  CHECK_NOTHROW(check_access(other, m, 0));
  CHECK(current_meta(m).uid == 61010);
  Caller root;
  REQUIRE(::chmod(priv.c_str(), 0700) == 0);
  CHECK_NOTHROW(check_access(root, m, 0));
}

TEST_CASE("array files: .npy header from memory then the array's bytes; .raw alone", "[vfs]") {
  TestCore engine(small_engine());
  TreeContext ctx{engine, engine.files, VfsOptions{}, {}};
  DType u2;
  u2.typestr = "<u2";
  u2.itemsize = 2;
  std::vector<uint8_t> bytes(2 * 3 * 1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  auto arr = std::make_shared<MemoryArray>(Shape{3, 1000}, u2, bytes, "mem");
  std::atomic<int> loads{0};
  ArraySpec spec{Shape{3, 1000}, u2, "mem", "direct", [&] {
                   ++loads;
                   return arr;
                 }, "", ""};
  auto npy = make_array_file(ctx, ArrayFormat::Npy, spec, meta(0444));
  auto raw = make_array_file(ctx, ArrayFormat::Raw, spec, meta(0444));
  CHECK(loads == 0);  // nothing loaded before open
  const std::string header = npy_header(u2, {3, 1000});
  CHECK(npy->size() == header.size() + bytes.size());
  CHECK(raw->size() == bytes.size());

  std::string expect = header + std::string(bytes.begin(), bytes.end());
  auto f = static_cast<FileNode&>(*npy).open();
  CHECK(f->keep_cache);
  CHECK_FALSE(f->direct_io);
  for (uint64_t off : {0ull, 1ull, 63ull, 127ull, 128ull, 129ull, 5000ull, 6100ull, 6127ull, 6128ull, 9999ull}) {
    for (size_t len : {1ul, 2ul, 64ul, 333ul, 100000ul}) {
      std::vector<char> buf(len, 'Z');
      const size_t n = f->read(off, len, buf.data());
      const size_t want = off >= expect.size() ? 0 : std::min<uint64_t>(len, expect.size() - off);
      INFO("off=" << off << " len=" << len);
      REQUIRE(n == want);
      CHECK(std::string(buf.data(), n) == expect.substr(std::min<uint64_t>(off, expect.size()), n));
    }
  }
  auto r = static_cast<FileNode&>(*raw).open();
  std::vector<char> buf(bytes.size());
  CHECK(r->read(0, buf.size(), buf.data()) == bytes.size());
  CHECK(std::memcmp(buf.data(), bytes.data(), bytes.size()) == 0);
  CHECK(loads == 2);
}

TEST_CASE("empty arrays: header-only .npy, empty .raw, no load", "[vfs]") {
  TestCore engine(small_engine());
  TreeContext ctx{engine, engine.files, VfsOptions{}, {}};
  DType f4;
  f4.typestr = "<f4";
  f4.itemsize = 4;
  ArraySpec spec{Shape{0, 5}, f4, "empty", "direct",
                 []() -> ArrayPtr { fail(EIO, "must not load"); }, "", ""};
  auto npy = make_array_file(ctx, ArrayFormat::Npy, spec, meta(0444));
  // numpy's 64-byte alignment, not a page: np.load(mmap_mode='r') maps from the page holding the
  // data offset, which must exist.
  CHECK(npy->size() == 128);
  auto f = static_cast<FileNode&>(*npy).open();
  char buf[8192];
  CHECK(f->read(0, sizeof buf, buf) == 128);
  auto raw = make_array_file(ctx, ArrayFormat::Raw, spec, meta(0444));
  CHECK(raw->size() == 0);
  CHECK(static_cast<FileNode&>(*raw).open()->read(0, 10, buf) == 0);
}

TEST_CASE("array files: a shape of more than 2^63 bytes never gets a wrapped size", "[vfs]") {
  const DType f8 = [] {
    DType t;
    t.typestr = "<f8";
    t.itemsize = 8;
    return t;
  }();
  TestCore engine(small_engine());
  TreeContext ctx{engine, engine.files, VfsOptions{}, {}};
  // 2^62 x 5 x 8 bytes wraps 2^64 to 2^63 x 5 mod 2^64 = 2^63: product() alone would list it.
  for (const Shape& shape : {Shape{uint64_t(1) << 62, 5}, Shape{uint64_t(1) << 60}, Shape{uint64_t(1) << 32, uint64_t(1) << 32, 2}}) {
    ArraySpec spec{shape, f8, "huge", "direct", []() -> ArrayPtr { fail(EIO, "must not load"); }, "", ""};
    for (ArrayFormat fmt : {ArrayFormat::Npy, ArrayFormat::Raw}) {
      auto node = make_array_file(ctx, fmt, spec, meta(0444));
      CHECK(node->size() == (fmt == ArrayFormat::Npy ? npy_header(f8, shape).size() : 0));
      try {
        static_cast<FileNode&>(*node).open();
        FAIL("opened");
      } catch (const Error& e) {
        CHECK(e.code() == EFBIG);
      }
    }
  }
  // Just below the limit: listed with its true size.
  ArraySpec ok{Shape{(uint64_t(1) << 59) - 4096}, f8, "big", "direct", []() -> ArrayPtr { return nullptr; }, "", ""};
  CHECK(make_array_file(ctx, ArrayFormat::Raw, ok, meta(0444))->size() == ((uint64_t(1) << 59) - 4096) * 8);
}

// A reader that finds its bytes decoded already (waited = false) is served by the window it has:
// the window keeps its size while the prefetch still follows the reader, and grows again the
// first time a read has to wait.
TEST_CASE("sequential prefetcher: the window grows only when a read waited", "[vfs]") {
  SequentialPrefetcher::Config cfg{1000, 64000, 100, 150};
  SequentialPrefetcher p(cfg);
  const uint64_t size = 1000000;
  p.on_read(0, 100, size);
  p.on_read(100, 100, size);
  CHECK(p.on_read(200, 100, size, nullptr, /*waited=*/false).len == 1000);  // the first window
  CHECK(p.window() == 1000);  // not doubled: that read did not wait
  uint64_t asked_until = 1300;
  for (uint64_t off = 300; off < 20000; off += 100) {
    const auto x = p.on_read(off, 100, size, nullptr, false);
    if (x.len) asked_until = x.off + x.len;
    CHECK(asked_until >= off + 100);  // still ahead of the reader
  }
  CHECK(p.window() == 1000);
  // One read that waited: the next window asked for is twice as large.
  uint64_t off = 20000;
  SequentialPrefetcher::Range r;
  for (; !(r = p.on_read(off, 100, size, nullptr, true)).len; off += 100) {
  }
  CHECK(p.window() == 2000);
}

TEST_CASE("sequential prefetcher: doubles while sequential, resets on a seek", "[vfs]") {
  SequentialPrefetcher::Config cfg{1000, 8000, 100, 150};
  SequentialPrefetcher p(cfg);
  const uint64_t size = 1000000;
  CHECK(p.on_read(0, 100, size).len == 0);    // first read: nothing yet
  CHECK(p.on_read(100, 100, size).len == 0);  // two reads are not a stream yet
  auto r = p.on_read(200, 100, size);          // three reads, 300 bytes (>= after): one window ahead
  CHECK(r.off == 300);
  CHECK(r.len == 1000);
  CHECK(p.window() == 2000);
  uint64_t off = 300, asked_until = 1300;
  uint64_t issued = 0;
  for (int i = 0; i < 200; ++i, off += 100) {
    auto x = p.on_read(off, 100, size);
    if (x.len) {
      CHECK(x.off == asked_until);  // contiguous prefetch ranges
      asked_until = x.off + x.len;
      ++issued;
    }
    CHECK(asked_until >= off + 100);  // always ahead of the reader
    CHECK(asked_until <= off + 100 + 8000);  // never more than the cap ahead
  }
  CHECK(p.window() == 8000);  // capped
  CHECK(issued < 80);        // once capped, one request per half window
  CHECK(asked_until > off);
  CHECK(p.on_read(500000, 100, size).len == 0);  // a far seek starts another stream
  CHECK(p.window() == 1000);
  CHECK(p.on_read(500100, 100, size).len == 0);
  CHECK(p.on_read(500200, 100, size).len == 1000);  // the new stream: three reads, 300 bytes
  p.on_read(500250, 100, size);                     // slightly out of order: same stream
  CHECK(p.window() >= 2000);                        // (a new stream would start at 1000)
  CHECK(p.on_read(size - 10, 10, size).len == 0);
}

TEST_CASE("sequential prefetcher: waits until a stream has gone `after` bytes", "[vfs]") {
  // What the kernel sends for one random mmap fault: a window around the fault and one
  // asynchronous read-ahead after it. That is not a stream: nothing is prefetched.
  SequentialPrefetcher p({1000, 8000, 100, 1000});
  const uint64_t size = 1000000;
  for (uint64_t base : {50000u, 20000u, 700000u, 3000u}) {
    CHECK(p.on_read(base, 300, size).len == 0);
    CHECK(p.on_read(base + 300, 300, size).len == 0);
    CHECK(p.on_read(base + 600, 300, size).len == 0);
  }
  // A real stream gets its prefetch once it has gone 1000 bytes.
  CHECK(p.on_read(10000, 300, size).len == 0);
  CHECK(p.on_read(10300, 300, size).len == 0);
  CHECK(p.on_read(10600, 300, size).len == 0);
  auto r = p.on_read(10900, 300, size);
  CHECK(r.off == 11200);
  CHECK(r.len == 1000);
}

TEST_CASE("sequential prefetcher: prefetch_after=0 decodes ahead from a stream's third read", "[vfs]") {
  // What --help, usage.md and the man page say of prefetch_after=0 (test_docs_agree.py keeps
  // them saying the same).
  SequentialPrefetcher p({1000, 8000, 100, 0});
  const uint64_t size = 1000000;
  CHECK(p.on_read(0, 100, size).len == 0);
  CHECK(p.on_read(100, 100, size).len == 0);  // the second read: not yet
  auto r = p.on_read(200, 100, size);          // the third
  CHECK(r.off == 300);
  CHECK(r.len == 1000);
}

TEST_CASE("sidecar dtype descr in JSON: numpy's descr list with padding", "[vfs]") {
  DType i4;
  i4.typestr = "<i4";
  i4.itemsize = 4;
  DType f8;
  f8.typestr = "<f8";
  f8.itemsize = 8;
  CHECK(dtype_descr_json(i4) == "<i4");
  DType inner;
  inner.itemsize = 8;
  inner.fields = {Field{"x", 0, {i4}, {}}};
  DType t;
  t.itemsize = 48;
  t.fields = {Field{"b", 8, {f8}, {3}}, Field{"a", 0, {i4}, {}}, Field{"n", 32, {inner}, {}}};
  const auto j = dtype_descr_json(t);
  CHECK(j.dump() ==
        R"([["a","<i4"],["","|V4"],["b","<f8",[3]],["n",[["x","<i4"],["","|V4"]]],["","|V8"]])");
}

TEST_CASE("Vfs over a directory: lazy, signature-based, read-only, control dir", "[vfs]") {
  const std::string d = tmpdir("vfs_tree");
  ::mkdir((d + "/sub").c_str(), 0750);
  write_file(d + "/notes.txt", "hello");
  write_file(d + "/fake.h5", kSig + std::string(100, '\0'), 0640);            // signature at 0
  write_file(d + "/ub.dat", std::string(512, 'u') + kSig + std::string(8, '\0'));  // user block
  write_file(d + "/late", std::string(600, 'u') + kSig);  // signature at 600: not HDF5
  ::symlink("nowhere", (d + "/dangling.h5").c_str());
  ::symlink("fake.h5", (d + "/alias.h5").c_str());

  TestCore engine(small_engine());
  std::atomic<int> factory_calls{0};
  Vfs fs(engine, engine.files, VfsOptions{}, d);
  fs.add_provider_factory([&](const ProviderRequest& req) -> std::unique_ptr<DirProvider> {
    ++factory_calls;
    if (req.kind != SourceKind::Directory || req.path.substr(req.path.size() - 4) != "/sub") return nullptr;
    return std::make_unique<CountingProvider>(
        std::vector<ChildEntry>{{"link", std::make_shared<SymlinkNode>(meta(0777), "../notes")}},
        factory_calls);
  });
  CHECK(factory_calls == 0);
  const Attr root = fs.getattr(Vfs::kRootIno);
  CHECK(S_ISDIR(root.mode));
  std::set<std::string> names;
  for (const auto& e : fs.readdir(Vfs::kRootIno)) names.insert(e.name);
  CHECK(names == std::set<std::string>{".h5direct", "alias.h5", "fake.h5", "sub", "ub.dat"});

  const Attr fake = fs.lookup(Vfs::kRootIno, "fake.h5");
  CHECK(S_ISDIR(fake.mode));
  CHECK((fake.mode & 07777) == 0550);
  const Attr sub = fs.lookup(Vfs::kRootIno, "sub");
  CHECK((sub.mode & 07777) == 0550);
  CHECK_THROWS_AS(fs.lookup(Vfs::kRootIno, "notes.txt"), Error);
  try {
    fs.lookup(Vfs::kRootIno, "missing");
  } catch (const Error& e) {
    CHECK(e.code() == ENOENT);
  }
  // The factory claimed sub/.
  const Attr link = fs.lookup(sub.ino, "link");
  CHECK(S_ISLNK(link.mode));
  CHECK(fs.readlink(link.ino) == "../notes");
  CHECK_THROWS_AS(fs.readlink(sub.ino), Error);

  // The control directory and stats.json (volatile, direct_io).
  const Attr ctl = fs.lookup(Vfs::kRootIno, ".h5direct");
  const Attr stats = fs.lookup(ctl.ino, "stats.json");
  CHECK(stats.is_volatile);
  auto f = fs.open(stats.ino, O_RDONLY);
  CHECK(f->direct_io);
  std::vector<char> buf(1 << 16);
  const size_t n = f->read(0, buf.size(), buf.data());
  const auto j = nlohmann::json::parse(std::string(buf.data(), n));
  CHECK(j.contains("bytes_served"));
  CHECK(j.contains("fallbacks"));
  CHECK(j["source"] == fs.source());

  // Read-only.
  for (int flags : {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC}) {
    try {
      fs.open(stats.ino, flags);
      FAIL("open for writing succeeded");
    } catch (const Error& e) {
      CHECK(e.code() == EROFS);
    }
  }
  try {
    fs.open(sub.ino, O_RDONLY);
    FAIL("opened a directory");
  } catch (const Error& e) {
    CHECK(e.code() == EISDIR);
  }
  // Not a real HDF5 file: listing it fails with an error, and the mount survives.
  CHECK_THROWS_AS(fs.readdir(fake.ino), Error);
  CHECK(fs.getattr(fake.ino).ino == fake.ino);
  fs.note_error(EIO);
  CHECK(nlohmann::json::parse(fs.render_stats())["error_replies"]["EIO"] == 1);
  CHECK(fs.statfs().files >= 7);
}

TEST_CASE("Vfs refuses a missing or non-HDF5 source", "[vfs]") {
  const std::string d = tmpdir("vfs_src");
  write_file(d + "/plain.txt", "text");
  TestCore engine(small_engine());
  try {
    Vfs fs(engine, engine.files, VfsOptions{}, d + "/missing");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ENOENT);
  }
  CHECK_THROWS_AS(Vfs(engine, engine.files, VfsOptions{}, d + "/plain.txt"), Error);
}

// Issue 15: the plain directory provider never looks up the excluded path (the mount point),
// however a symlink reaches it, and shows uid/gid/umask overrides; open files are counted.
TEST_CASE("the mount point is never shown or entered; uid, gid, umask override what is shown", "[vfs]") {
  const std::string d = tmpdir("vfs_exclude");
  const std::string src = d + "/src", mnt = d + "/mnt", other = d + "/other";
  for (const auto& p : {src, mnt, other, mnt + "/inner"}) ::mkdir(p.c_str(), 0755);
  write_file(src + "/fake.h5", kSig + std::string(100, '\0'), 0640);
  write_file(mnt + "/inner/f.h5", kSig + std::string(100, '\0'));
  ::symlink(mnt.c_str(), (src + "/to_mnt").c_str());                     // absolute
  ::symlink("../mnt/inner", (src + "/to_inner").c_str());                 // relative, below it
  ::symlink((other + "/../mnt/./inner/f.h5").c_str(), (src + "/to_file.h5").c_str());  // via ..
  ::symlink((src + "/to_mnt").c_str(), (src + "/chain").c_str());         // a link to a link
  ::symlink(other.c_str(), (src + "/to_other").c_str());                  // fine: shown
  TestCore engine(small_engine());
  VfsOptions o;
  o.exclude_path = mnt;
  o.show_uid = 4321;
  o.show_gid = 99;
  o.umask = 077;
  Vfs fs(engine, engine.files, o, src);
  std::set<std::string> names;
  for (const auto& e : fs.readdir(Vfs::kRootIno)) names.insert(e.name);
  CHECK(names == std::set<std::string>{".h5direct", "fake.h5", "to_other"});
  {  // The same mount point spelled with "..", "." and a trailing slash is the same exclusion.
    VfsOptions o2;
    o2.exclude_path = other + "/.././mnt/";
    Vfs spelled(engine, engine.files, o2, src);
    std::set<std::string> got;
    for (const auto& e : spelled.readdir(Vfs::kRootIno)) got.insert(e.name);
    CHECK(got == names);
  }
  const Attr fake = fs.lookup(Vfs::kRootIno, "fake.h5");
  CHECK(fake.uid == 4321);
  CHECK(fake.gid == 99);
  CHECK((fake.mode & 07777) == (0777 & ~077 & 0555));  // a directory: 0500
  // Without the exclusion the same links are shown (the test would notice if they were not made).
  Vfs plain(engine, engine.files, VfsOptions{}, src);
  std::set<std::string> all;
  for (const auto& e : plain.readdir(Vfs::kRootIno)) all.insert(e.name);
  CHECK(all == std::set<std::string>{".h5direct", "chain", "fake.h5", "to_file.h5", "to_inner", "to_mnt", "to_other"});
  CHECK((plain.lookup(Vfs::kRootIno, "fake.h5").mode & 07777) == 0550);  // the source's r bits, r-x

  const int64_t before = OpenFile::live();
  {
    auto f = fs.open(fs.lookup(fs.lookup(Vfs::kRootIno, ".h5direct").ino, "stats.json").ino, O_RDONLY);
    CHECK(OpenFile::live() == before + 1);
  }
  CHECK(OpenFile::live() == before);
}

TEST_CASE("supplementary groups of a request's thread, from /proc", "[vfs][access]") {
  // The oracle: getgroups() of this thread.
  std::vector<gid_t> expected(static_cast<size_t>(::getgroups(0, nullptr)));
  REQUIRE(::getgroups(static_cast<int>(expected.size()), expected.data()) == static_cast<int>(expected.size()));
  std::vector<gid_t> got{12345};
  REQUIRE(vfs::thread_groups(static_cast<long>(::gettid()), got));
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  CHECK(got == expected);
  CHECK_FALSE(vfs::thread_groups(-1, got));

  std::vector<gid_t> g;
  // A status longer than a page, the Groups line last (libfuse 3.14 read one page, unterminated).
  std::string status = "Name:\tx\n" + std::string(5000, 'a') + "\nGroups:\t4 24 27 4294967295 \n";
  REQUIRE(vfs::parse_status_groups(status, g));
  CHECK(g == std::vector<gid_t>{4, 24, 27, 4294967295u});
  REQUIRE(vfs::parse_status_groups("Groups:\t\nNgid:\t0\n", g));
  CHECK(g.empty());
  CHECK_FALSE(vfs::parse_status_groups("Name:\tx\n", g));
  CHECK_FALSE(vfs::parse_status_groups("Name:\tx\nGroups:\t4 x5\n", g));
  CHECK_FALSE(vfs::parse_status_groups("Name:\tx\nGroups:\t4294967296\n", g));
}

namespace {

// What the FUSE adapter would be told: the names of each directory that changed.
class RecordingListener final : public TreeListener {
 public:
  void names_changed(uint64_t dir_ino, const std::vector<std::string>& names) override {
    for (const std::string& n : names) seen.emplace_back(dir_ino, n);
  }
  std::vector<std::pair<uint64_t, std::string>> take() { return std::exchange(seen, {}); }
  std::vector<std::pair<uint64_t, std::string>> seen;
};

std::set<std::string> names_of(Vfs& fs, uint64_t ino) {
  std::set<std::string> out;
  for (const auto& e : fs.readdir(ino)) out.insert(e.name);
  return out;
}

// Longer than the revalidate interval of the test below (a check is due), and than the
// coarse-clock margin a listing taken just after a change is made again for.
void past_interval() { ::usleep(120 * 1000); }

}  // namespace

TEST_CASE("changed_names: added, removed and replaced names, sorted", "[vfs][revalidate]") {
  auto f = [] { return make_text_file([] { return std::string(); }, NodeMeta{}); };
  NodePtr a = f(), b = f(), c = f(), c2 = f(), e = f();
  DirNode::Listing before, after;
  before.entries = {{"a", a}, {"b", b}, {"c", c}};
  after.entries = {{"b", b}, {"c", c2}, {"d", f()}, {"e", e}};
  CHECK(DirNode::changed_names(before, after) == std::vector<std::string>{"a", "c", "d", "e"});
  CHECK(DirNode::changed_names(before, before).empty());
  CHECK(DirNode::changed_names(DirNode::Listing{}, before) == std::vector<std::string>{"a", "b", "c"});
  CHECK(DirNode::changed_names(after, DirNode::Listing{}) == std::vector<std::string>{"b", "c", "d", "e"});
}

TEST_CASE("a source directory follows its source: names added, removed, replaced, and nothing else",
          "[vfs][revalidate]") {
  const std::string d = tmpdir("vfs_reval");
  ::mkdir((d + "/sub").c_str(), 0755);
  ::mkdir((d + "/gone").c_str(), 0755);
  write_file(d + "/a.h5", kSig + std::string(100, '\0'));
  write_file(d + "/sub/inner.h5", kSig + std::string(100, '\0'));
  write_file(d + "/notes.txt", "not hdf5");

  TestCore engine(small_engine());
  VfsOptions o;
  o.revalidate = 0.05;
  Vfs fs(engine, engine.files, o, d);
  // A directory holding a file named MARK is shown by this factory's provider (as a run is).
  fs.add_provider_factory([](const ProviderRequest& req) -> std::unique_ptr<DirProvider> {
    if (req.kind != SourceKind::Directory || ::access((req.path + "/MARK").c_str(), F_OK) != 0) return nullptr;
    static std::atomic<int> calls{0};
    return std::make_unique<CountingProvider>(
        std::vector<ChildEntry>{{"as_a_run", make_text_file([] { return std::string("r"); }, NodeMeta{})}}, calls);
  });
  RecordingListener heard;
  fs.set_listener(&heard);
  const uint64_t root = Vfs::kRootIno;

  CHECK(names_of(fs, root) == std::set<std::string>{".h5direct", "a.h5", "gone", "sub"});
  const uint64_t ino_a = fs.lookup(root, "a.h5").ino, ino_sub = fs.lookup(root, "sub").ino;
  CHECK(fs.lookup(root, "a.h5").cache_limit == Approx(0.05));  // names below it are kept as long
  CHECK(fs.getattr(root).cache_limit == Approx(0.05));
  CHECK(names_of(fs, ino_sub) == std::set<std::string>{"inner.h5"});
  past_interval();
  CHECK(names_of(fs, root) == std::set<std::string>{".h5direct", "a.h5", "gone", "sub"});
  CHECK(heard.take().empty());  // checked, nothing changed: no name is reported

  // Added (a file, a directory), removed (a directory): one stat of the directory tells.
  write_file(d + "/b.h5", kSig + std::string(100, '\0'));
  ::mkdir((d + "/new").c_str(), 0755);
  REQUIRE(::rmdir((d + "/gone").c_str()) == 0);
  past_interval();
  CHECK(names_of(fs, root) == std::set<std::string>{".h5direct", "a.h5", "b.h5", "new", "sub"});
  using Heard = std::vector<std::pair<uint64_t, std::string>>;
  CHECK(heard.take() == Heard{{root, "b.h5"}, {root, "gone"}, {root, "new"}});
  // Entries that did not change keep their nodes: same inode, their own listing kept.
  CHECK(fs.lookup(root, "a.h5").ino == ino_a);
  CHECK(fs.lookup(root, "sub").ino == ino_sub);
  CHECK_THROWS_AS(fs.lookup(root, "gone"), Error);

  // Replaced by rename: the same name for another file is another node.
  write_file(d + "/a.h5.tmp", kSig + std::string(200, '\0'));
  REQUIRE(::rename((d + "/a.h5.tmp").c_str(), (d + "/a.h5").c_str()) == 0);
  past_interval();
  CHECK(names_of(fs, root).count("a.h5") == 1);
  CHECK(fs.lookup(root, "a.h5").ino != ino_a);
  CHECK(heard.take() == Heard{{root, "a.h5"}});

  // Nested: the subdirectory checks itself.
  ::unlink((d + "/sub/inner.h5").c_str());
  past_interval();
  CHECK(names_of(fs, ino_sub).empty());
  CHECK(heard.take() == Heard{{ino_sub, "inner.h5"}});

  // A file that gets its signature after it was listed (written in place: its directory's
  // times do not change) shows once it has one.
  write_file(d + "/late.h5", "");
  past_interval();
  CHECK(names_of(fs, root).count("late.h5") == 0);
  past_interval();
  CHECK(names_of(fs, root).count("late.h5") == 0);
  heard.take();
  {
    const int fd = ::open((d + "/late.h5").c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const std::string bytes = kSig + std::string(100, '\0');
    REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
    ::close(fd);
  }
  past_interval();
  CHECK(names_of(fs, root).count("late.h5") == 1);
  CHECK(heard.take() == Heard{{root, "late.h5"}});

  // A plain directory that a factory wants once it changed (cp -r makes a run's directory before
  // its files) is shown by that factory's provider.
  const uint64_t ino_new = fs.lookup(root, "new").ino;
  CHECK(names_of(fs, ino_new).empty());
  write_file(d + "/new/MARK", "");
  past_interval();
  CHECK(names_of(fs, ino_new) == std::set<std::string>{"as_a_run"});
  CHECK(heard.take() == Heard{{ino_new, "as_a_run"}});
}

TEST_CASE("revalidate=0: a source directory is listed once", "[vfs][revalidate]") {
  const std::string d = tmpdir("vfs_reval0");
  write_file(d + "/a.h5", kSig + std::string(100, '\0'));
  TestCore engine(small_engine());
  VfsOptions o;
  o.revalidate = 0;
  Vfs fs(engine, engine.files, o, d);
  RecordingListener heard;
  fs.set_listener(&heard);
  CHECK(names_of(fs, Vfs::kRootIno) == std::set<std::string>{".h5direct", "a.h5"});
  CHECK(fs.lookup(Vfs::kRootIno, "a.h5").cache_limit < 0);
  write_file(d + "/b.h5", kSig + std::string(100, '\0'));
  past_interval();
  CHECK(names_of(fs, Vfs::kRootIno) == std::set<std::string>{".h5direct", "a.h5"});
  CHECK(heard.take().empty());
}
