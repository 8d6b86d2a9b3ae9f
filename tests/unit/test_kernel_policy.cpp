// What the kernel may keep of the answers and how a read may be answered (vfs/kernel_policy.h),
// decided by vfs without a mount: the lifetimes the FUSE adapter hands the kernel (attributes,
// names, missing names, listings) and whether a read may be spliced or followed by pushes.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "core/engine/engine.h"
#include "core/write/writer.h"
#include "tests/support/h5fixture.h"
#include "vfs/kernel_policy.h"
#include "vfs/vfs.h"

using namespace h5d;
using h5d::test::CoreOptions;
using h5d::test::TestCore;
using namespace h5d::vfs;

namespace {

// A source directory with one file that carries the HDF5 signature (listed, never opened here).
std::string source_dir(const std::string& name) {
  const std::string d = test::scratch_path(name);
  REQUIRE((::mkdir(d.c_str(), 0755) == 0 || errno == EEXIST));
  std::ofstream(d + "/a.h5", std::ios::binary) << std::string("\x89HDF\r\n\x1a\n", 8) << std::string(100, '\0');
  return d;
}

CoreOptions small_engine() {
  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 16 << 20;
  return o;
}

constexpr CacheTimeouts kMount{86400.0, 3600.0};  // attr_timeout, entry_timeout

}  // namespace

TEST_CASE("kernel lifetimes: the mount's timeouts, capped by a node's cache limit, none for volatile nodes",
          "[vfs][kernel_policy]") {
  Attr plain;
  CHECK(attr_ttl(plain, kMount) == 86400.0);
  CHECK(entry_ttl(plain, kMount) == 3600.0);

  Attr live;  // shown from a source that may change: at most its revalidation interval
  live.cache_limit = 2.5;
  CHECK(attr_ttl(live, kMount) == 2.5);
  CHECK(entry_ttl(live, kMount) == 2.5);
  live.cache_limit = 0;  // revalidated at every lookup: nothing is kept
  CHECK(attr_ttl(live, kMount) == 0.0);
  CHECK(entry_ttl(live, kMount) == 0.0);
  live.cache_limit = 1e9;  // a limit beyond the mount's timeouts changes nothing
  CHECK(attr_ttl(live, kMount) == 86400.0);
  CHECK(entry_ttl(live, kMount) == 3600.0);

  Attr vol;  // size and content change (stats.json): attributes never kept, the name is
  vol.is_volatile = true;
  CHECK(attr_ttl(vol, kMount) == 0.0);
  CHECK(entry_ttl(vol, kMount) == 3600.0);

  // A missing name: as long as a name in its directory, on read-only mounts only.
  CHECK(negative_entry_ttl(false, &plain, kMount) == 3600.0);
  live.cache_limit = 2.5;
  CHECK(negative_entry_ttl(false, &live, kMount) == 2.5);
  CHECK(negative_entry_ttl(true, &plain, kMount) == 0.0);   // rw: other processes create names
  CHECK(negative_entry_ttl(false, nullptr, kMount) == 0.0);  // the directory is unknown

  CHECK(keep_listing(false, plain));
  CHECK_FALSE(keep_listing(false, live));
  CHECK_FALSE(keep_listing(true, plain));
}

TEST_CASE("kernel lifetimes from a Vfs: missing names and listings follow the directory and the mount",
          "[vfs][kernel_policy]") {
  const std::string d = source_dir("kernel_policy");
  TestCore engine(small_engine());
  const uint64_t root = Vfs::kRootIno;

  SECTION("read-only, sources taken as never changing") {
    VfsOptions o;
    o.revalidate = 0;
    Vfs fs(engine, engine.files, o, d);
    REQUIRE(fs.lookup(root, "a.h5").ino != 0);
    CHECK_THROWS(fs.lookup(root, "missing.h5"));
    CHECK(fs.negative_entry_ttl(root, kMount) == 3600.0);
    CHECK(fs.keep_listing(root));
    CHECK(fs.negative_entry_ttl(987654321, kMount) == 0.0);  // a parent the tree does not know
    // The control directory's stats.json changes at every read: its attributes are never kept.
    const Attr ctl = fs.lookup(root, Vfs::kControlDir);
    const Attr stats = fs.lookup(ctl.ino, "stats.json");
    CHECK(attr_ttl(stats, kMount) == 0.0);
    CHECK(attr_ttl(fs.lookup(root, "a.h5"), kMount) == 86400.0);
  }
  SECTION("read-only, directories revalidated against their source") {
    VfsOptions o;
    o.revalidate = 0.5;
    Vfs fs(engine, engine.files, o, d);
    // As the adapter asks: after the lookup that found the name missing (and listed the directory).
    CHECK_THROWS(fs.lookup(root, "missing.h5"));
    CHECK(fs.negative_entry_ttl(root, kMount) == 0.5);
    CHECK_FALSE(fs.keep_listing(root));
    CHECK(entry_ttl(fs.lookup(root, "a.h5"), kMount) == 0.5);
  }
  SECTION("writable: nothing missing is remembered, no listing kept") {
    VfsOptions o;
    o.revalidate = 0;
    o.writable = true;
    Vfs fs(engine, engine.files, o, d);
    Writer w(engine.files, {});
    fs.set_writer(&w);
    REQUIRE(fs.writable());
    CHECK_THROWS(fs.lookup(root, "missing.h5"));
    CHECK(fs.negative_entry_ttl(root, kMount) == 0.0);
    CHECK_FALSE(fs.keep_listing(root));
  }
}

TEST_CASE("splice and push eligibility: read-only mounts, what the adapter can, whole reads",
          "[vfs][kernel_policy]") {
  ReplyMeans m;
  m.splice = true;
  m.splice_max = 1u << 20;
  m.push = true;
  CHECK(may_splice(false, m, 4096));
  CHECK(may_splice(false, m, 1u << 20));
  CHECK_FALSE(may_splice(false, m, (1u << 20) + 4096));  // beyond libfuse's pipe
  CHECK_FALSE(may_splice(true, m, 4096));                 // written bytes may not be in the file yet
  CHECK(may_push(false, m, 131072, 131072));
  CHECK_FALSE(may_push(false, m, 131072, 4096));  // a short read: the file's end
  CHECK_FALSE(may_push(true, m, 131072, 131072));
  ReplyMeans none;  // -o splice=0,push=0, or a kernel without spliced writes
  CHECK_FALSE(may_splice(false, none, 4096));
  CHECK_FALSE(may_push(false, none, 4096, 4096));

  // Through a Vfs: the mount's writability is its own.
  const std::string d = source_dir("kernel_policy_reads");
  TestCore engine(small_engine());
  VfsOptions o;
  Vfs ro(engine, engine.files, o, d);
  CHECK(ro.may_splice(m, 4096));
  CHECK(ro.may_push(m, 4096, 4096));
  o.writable = true;
  Vfs rw(engine, engine.files, o, d);
  Writer w(engine.files, {});
  rw.set_writer(&w);
  CHECK_FALSE(rw.may_splice(m, 4096));
  CHECK_FALSE(rw.may_push(m, 4096, 4096));
}
