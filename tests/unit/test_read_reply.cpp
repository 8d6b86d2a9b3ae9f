// One reply per read (vfs/read_reply.h): what Vfs::answer_read hands the FUSE adapter, checked
// without a mount against the bytes libhdf5 reads: the reply's bytes, the pushes it describes
// (their bytes, cut before pages of reads in flight), and the pushed bytes counted once.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/h5fixture.h"
#include "tests/support/vfs_fixture.h"
#include "vfs/read_reply.h"
#include "vfs/vfs.h"

using namespace h5d;
using namespace h5d::vfs;

TEST_CASE("reads in flight: a push is cut before the first read of its file it overlaps", "[vfs][reply]") {
  ReadsInFlight r;
  r.add(7, 1000, 2000);
  r.add(8, 0, 100);  // another file: never in the way
  CHECK(r.clip(7, 0, 500) == 500);      // before it
  CHECK(r.clip(7, 0, 1500) == 1000);    // into it: cut at its start
  CHECK(r.clip(7, 1200, 3000) == 1200); // starts inside it: nothing left
  CHECK(r.clip(7, 2000, 3000) == 3000); // after it
  CHECK(r.clip(8, 200, 300) == 300);
  r.remove(7, 1000, 2000);
  CHECK(r.clip(7, 0, 1500) == 1500);
}

TEST_CASE("push buffers: a few small ones kept for reuse, large ones freed", "[vfs][reply]") {
  PushBuffers p;
  std::vector<char> b = p.take();
  CHECK(b.capacity() == 0);  // none kept yet
  b.resize(4096);
  const char* kept = b.data();
  p.give(std::move(b));
  std::vector<char> again = p.take();
  CHECK(again.data() == kept);  // the same memory
  CHECK(again.empty());         // handed back empty
  std::vector<char> big(PushBuffers::kKeepBytes + 1);
  p.give(std::move(big));
  CHECK(p.take().capacity() == 0);  // never kept
}

TEST_CASE("a read's answer: its bytes, the rest of its chunk pushed, reads in flight left alone",
          "[vfs][reply]") {
  const std::string dir = test::scratch_path("read_reply");
  REQUIRE((::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST));
  const std::string path = dir + "/a.h5";
  test::DsetSpec d;
  d.dims = {8 * 16384};
  d.chunks = {16384};  // 32 KiB chunks of uint16, compressed: decoded whole by any read
  d.shuffle = d.deflate = true;
  test::write_dataset({path}, d);
  const std::vector<uint8_t> expected = test::h5_read_all(path, "/d");

  test::VfsOver v(path);
  Vfs& fs = v.fs;
  const Attr npy = fs.lookup(Vfs::kRootIno, "d.npy");
  const uint64_t header = npy.size - expected.size();
  auto f = fs.open(npy.ino, O_RDONLY);
  ReplyMeans means;
  means.push = true;
  std::vector<char> buf;

  // Bytes in the middle of the second chunk: the rest of that chunk is worth pushing, except the
  // pages another read of the same file is being answered for.
  const uint64_t chunk = 32768, at = header + chunk + 8192;
  ReadReply other = fs.answer_read(*f, npy.ino, header + chunk + 24576, 4096, means, 0, buf);
  std::vector<char> buf2;
  ReadReply r = fs.answer_read(*f, npy.ino, at, 4096, means, 0, buf2);
  REQUIRE_FALSE(r.spliced());
  REQUIRE(r.size() == 4096);
  CHECK(std::memcmp(r.bytes(), expected.data() + (at - header), 4096) == 0);
  std::vector<std::pair<uint64_t, uint64_t>> pushed;
  r.push([&](uint64_t off, const char* data, size_t n) {
    CHECK(std::memcmp(data, expected.data() + (off - header), n) == 0);
    pushed.emplace_back(off, off + n);
    return true;
  });
  REQUIRE_FALSE(pushed.empty());
  uint64_t total = 0;
  for (const auto& [lo, hi] : pushed) {
    CHECK((hi <= at || lo >= at + 4096));                      // not the read's own bytes
    CHECK((hi <= header + chunk + 24576 || lo >= header + chunk + 28672));  // nor the other read's
    total += hi - lo;
  }
  const nlohmann::json s = v.figures();
  CHECK(s["bytes_pushed"] == total);

  // A store the kernel refuses counts nothing.
  ReadReply refused = fs.answer_read(*f, npy.ino, header + 3 * chunk + 100, 100, means, 0, buf2);
  refused.push([](uint64_t, const char*, size_t) { return false; });
  CHECK(v.figures()["bytes_pushed"] == total);

  // Without the means to push, an answer describes no push.
  ReadReply none = fs.answer_read(*f, npy.ino, header + 5 * chunk + 100, 100, ReplyMeans{}, 0, buf2);
  bool called = false;
  none.push([&](uint64_t, const char*, size_t) { return called = true; });
  CHECK_FALSE(called);
}
