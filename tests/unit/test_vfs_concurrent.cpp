// The virtual tree walked by several threads at once over a fresh Vfs: the first listings of
// directories and HDF5 files, lookups, attributes, sidecar renderings and array reads all race
// (what FUSE threads do when `ls -R` and readers start together). Every thread must see the tree a
// single thread sees afterwards, and every .raw file must hold the bytes H5Dread gives. Under
// ThreadSanitizer (tools/test-sanitizers.sh) this is also the race and lock-order check of the vfs
// listing path.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/engine.h"
#include "core/error.h"
#include "tests/support/h5fixture.h"
#include "vfs/vfs.h"

using namespace h5d;
using h5d::test::CoreOptions;
using h5d::test::TestCore;
using namespace h5d::vfs;

namespace {

// path -> what a thread saw there: kind, size and content (files), or the errno of a failure.
using Seen = std::map<std::string, std::string>;

std::string read_all(Vfs& fs, uint64_t ino) {
  auto f = fs.open(ino, O_RDONLY);
  std::string out;
  std::vector<char> buf(1 << 16);
  for (;;) {
    const size_t n = f->read(out.size(), buf.size(), buf.data());
    if (n == 0) break;
    out.append(buf.data(), n);
  }
  return out;
}

void walk(Vfs& fs, uint64_t dir, const std::string& path, Seen& seen) {
  std::vector<DirEntry> entries;
  try {
    entries = fs.readdir(dir);
  } catch (const Error& e) {
    seen[path] = "readdir E" + std::to_string(e.code());
    return;
  }
  for (const DirEntry& e : entries) {
    if (e.name == Vfs::kControlDir) continue;  // stats.json counts these very reads
    const std::string p = path + "/" + e.name;
    try {
      const Attr a = fs.lookup(dir, e.name);
      if (S_ISDIR(a.mode)) {
        seen[p] = "dir";
        walk(fs, a.ino, p, seen);
      } else if (S_ISREG(a.mode)) {
        const std::string content = read_all(fs, a.ino);
        seen[p] = "file " + std::to_string(fs.getattr(a.ino).size) + " " + content;
      } else {
        seen[p] = "other";
      }
    } catch (const Error& ex) {
      seen[p] = "E" + std::to_string(ex.code());
    }
  }
}

}  // namespace

TEST_CASE("the vfs walked by many threads at once: each sees what one thread sees", "[vfs]") {
  const std::string d = test::scratch_path("vfs_concurrent");
  REQUIRE(std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "/sub'").c_str()) == 0);
  test::DsetSpec gz;
  gz.name = "gz";
  gz.dims = {64, 50};
  gz.chunks = {10, 7};
  gz.deflate = true;
  gz.shuffle = true;
  test::DsetSpec contig;
  contig.name = "contig";
  contig.layout = "contiguous";
  contig.dims = {100, 3};
  contig.type = H5T_IEEE_F64LE;
  test::DsetSpec small;
  small.name = "small";
  small.dims = {5};
  small.chunks = {2};
  const std::vector<std::pair<std::string, std::vector<test::DsetSpec>>> files = {
      {d + "/a.h5", {gz, contig}}, {d + "/sub/b.h5", {small, gz}}, {d + "/c.h5", {contig}}};
  uint32_t seed = 1;
  for (const auto& [path, specs] : files) {
    test::FileSpec fsp;
    fsp.path = path;
    for (const auto& s : specs) test::write_dataset(fsp, s, seed++);
  }

  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 1 << 16;  // small: chunks are evicted and decoded again while others read
  TestCore engine(o);
  Vfs fs(engine, engine.files, VfsOptions{}, d);
  constexpr size_t kThreads = 4;
  std::vector<Seen> seen(kThreads);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < kThreads; ++t) ts.emplace_back([&, t] { walk(fs, Vfs::kRootIno, "", seen[t]); });
  for (auto& t : ts) t.join();

  Seen once;
  walk(fs, Vfs::kRootIno, "", once);
  REQUIRE(once.size() > 10);
  for (size_t t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(seen[t] == once);
  }
  // The oracle for the bytes: H5Dread.
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> raws = {
      {"/a.h5/gz.raw", {d + "/a.h5", "gz"}},
      {"/a.h5/contig.raw", {d + "/a.h5", "contig"}},
      {"/sub/b.h5/small.raw", {d + "/sub/b.h5", "small"}},
      {"/c.h5/contig.raw", {d + "/c.h5", "contig"}}};
  for (const auto& [vpath, src] : raws) {
    INFO(vpath);
    REQUIRE(once.count(vpath));
    const std::vector<uint8_t> expect = test::h5_read_all(src.first, src.second);
    const std::string& got = once[vpath];
    const std::string prefix = "file " + std::to_string(expect.size()) + " ";
    REQUIRE(got.size() == prefix.size() + expect.size());
    CHECK(got.compare(0, prefix.size(), prefix) == 0);
    CHECK(std::memcmp(expect.data(), got.data() + prefix.size(), expect.size()) == 0);
  }
}
