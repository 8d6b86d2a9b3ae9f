// The mount's read figures are counted once, in vfs (vfs::ReadCounters), and stats.json and the
// metrics file show that one count: a read of a dataset's .npy through the Vfs (no mount),
// checked against the bytes libhdf5 reads and against both renderings.
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
#include "vfs/vfs.h"

using namespace h5d;
using namespace h5d::vfs;

namespace {

uint64_t metric(const std::string& text, const std::string& name) {
  const std::string at = "\nh5direct_" + name + " ";
  const size_t p = text.find(at);
  REQUIRE(p != std::string::npos);
  return std::stoull(text.substr(p + at.size()));
}

}  // namespace

TEST_CASE("read figures: each read of data counted once, the same in stats.json and metrics", "[vfs][stats]") {
  const std::string dir = test::scratch_path("vfs_stats");
  REQUIRE((::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST));
  const std::string path = dir + "/a.h5";
  test::DsetSpec d;
  d.dims = {1000};
  d.layout = "contiguous";
  test::write_dataset({path}, d);
  const std::vector<uint8_t> expected = test::h5_read_all(path, "/d");
  REQUIRE(expected.size() == 2000);

  test::VfsOver v(path);
  Vfs& fs = v.fs;
  auto figures = [&] { return v.figures(); };
  REQUIRE(figures()["reads"] == 0);
  REQUIRE(figures()["bytes_served"] == 0);

  const Attr npy = fs.lookup(Vfs::kRootIno, "d.npy");
  REQUIRE(npy.size > expected.size());
  const size_t header = npy.size - expected.size();
  auto f = fs.open(npy.ino, O_RDONLY);
  std::vector<char> buf(npy.size);
  OpenFile::Pushes pushes;
  REQUIRE(f->read_pushing(0, buf.size(), buf.data(), pushes) == npy.size);
  CHECK(std::memcmp(buf.data() + header, expected.data(), expected.size()) == 0);
  // One read request; its data bytes (the header is the Vfs's own text).
  CHECK(figures()["reads"] == 1);
  CHECK(figures()["bytes_served"] == expected.size());
  // Reading the header alone reads no data: not a read of the array.
  REQUIRE(f->read(0, 16, buf.data()) == 16);
  CHECK(figures()["reads"] == 1);
  // The copy of pushed pages reads data too (counted as the reads that served it).
  REQUIRE(f->read_for_push(header, 100, buf.data()) == 100);
  const nlohmann::json s = figures();
  CHECK(s["reads"] == 2);
  CHECK(s["bytes_served"] == expected.size() + 100);
  CHECK(s["bytes_pushed"] == 0);  // pushed only by a reply (test_read_reply.cpp)
  CHECK(s["bytes_spliced"] == 0);
  // Reading stats.json is not a read of data.
  const Attr ctl = fs.lookup(Vfs::kRootIno, Vfs::kControlDir);
  auto sf = fs.open(fs.lookup(ctl.ino, "stats.json").ino, O_RDONLY);
  std::vector<char> sbuf(1 << 16);
  REQUIRE(sf->read(0, sbuf.size(), sbuf.data()) > 0);
  // The metrics file renders the same counts.
  const std::string m = "\n" + fs.render_metrics();
  CHECK(metric(m, "reads_total") == 2);
  CHECK(metric(m, "bytes_served_total") == expected.size() + 100);
  CHECK(metric(m, "bytes_pushed_total") == 0);
  CHECK(metric(m, "bytes_spliced_total") == 0);
}
