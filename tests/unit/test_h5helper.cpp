// The helper processes (core/h5lib/h5helper.h) against the built h5direct-helper: an engine with
// helpers answers like one without (the same code runs in the helper), and a helper killed from
// outside while idle is restarted without marking anything bad.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

EngineOptions with_helpers() {
  EngineOptions o;
  o.helper = HelperOptions{H5D_HELPER_PATH, 2, 20000, 30000};  // path, count, timeout, backoff
  return o;
}

std::vector<uint8_t> read_all(Engine& e, const std::string& file, const std::string& dset) {
  auto a = e.open_file(file)->dataset_array(dset);
  std::vector<uint8_t> out(a->nbytes());
  e.read_bytes(*a, 0, out.size(), out.data());
  return out;
}

}  // namespace

TEST_CASE("helpers: metadata and library reads equal the in-process answers and H5Dread", "[h5helper]") {
  FileSpec f;
  f.path = scratch_path("helper.h5");
  for (const char* layout : {"contiguous", "chunked", "compact"}) {
    DsetSpec d;
    d.name = layout;
    d.type = H5T_STD_I32BE;
    d.dims = {7, 5};
    d.layout = layout;
    d.chunks = {2, 5};
    d.deflate = std::strcmp(layout, "chunked") == 0;
    write_dataset(f, d);
  }
  EngineOptions local_opts = with_helpers();
  local_opts.helper.path.clear();
  Engine local(local_opts), remote(with_helpers());
  REQUIRE(remote.helpers() != nullptr);
  REQUIRE(local.helpers() == nullptr);
  auto lf = local.open_file(f.path), rf = remote.open_file(f.path);
  auto lg = lf->list_group("/"), rg = rf->list_group("/");
  REQUIRE(lg.size() == 3);
  REQUIRE(rg.size() == lg.size());
  for (size_t i = 0; i < lg.size(); ++i) {
    CHECK(rg[i].name == lg[i].name);
    CHECK(rg[i].kind == lg[i].kind);
  }
  CHECK(rf->kind_of("/") == ObjectKind::Group);
  CHECK(rf->kind_of("/nope") == ObjectKind::Other);
  for (const char* layout : {"contiguous", "chunked", "compact"}) {
    const std::string p = std::string("/") + layout;
    INFO(p);
    auto li = lf->dataset_info(p), ri = rf->dataset_info(p);
    CHECK(ri->shape == li->shape);
    CHECK(ri->dtype.typestr == li->dtype.typestr);
    CHECK(ri->read_path == li->read_path);
    CHECK(rf->storage_info(p).contiguous_addr == lf->storage_info(p).contiguous_addr);
    // The oracle: libhdf5's H5Dread in this process.
    CHECK(read_all(remote, f.path, p) == h5_read_all(f.path, p));
  }
  CHECK(remote.helpers()->requests() > 0);
  CHECK(remote.helpers()->failures() == 0);
  CHECK_THROWS_AS(rf->dataset_info("/missing"), Error);  // the helper's ENOENT, not a failure
  CHECK(remote.helpers()->failures() == 0);
}

TEST_CASE("helpers: one killed while idle is restarted, its files are not marked bad", "[h5helper]") {
  FileSpec f;
  f.path = scratch_path("helper_kill.h5");
  DsetSpec d;
  d.name = "x";
  d.type = H5T_STD_U16LE;
  d.dims = {10};
  d.layout = "contiguous";
  write_dataset(f, d);
  EngineOptions o = with_helpers();
  o.helper.count = 1;
  Engine e(o);
  auto h = e.open_file(f.path);
  REQUIRE(h->kind_of("/x") == ObjectKind::Dataset);
  // Kill this process's helper children, by pid (found in /proc: parent = us).
  int killed = 0;
  if (DIR* proc = ::opendir("/proc")) {
    while (struct dirent* ent = ::readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(ent->d_name));
      if (pid <= 0) continue;
      std::ifstream st("/proc/" + std::string(ent->d_name) + "/stat");
      std::string line;
      std::getline(st, line);
      const auto close = line.rfind(')');
      if (close == std::string::npos || line.find("(h5direct-helpe") == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      std::string state;
      long ppid = 0;
      rest >> state >> ppid;
      if (ppid == ::getpid() && ::kill(pid, SIGKILL) == 0) ++killed;
    }
    ::closedir(proc);
  }
  REQUIRE(killed == 1);
  ::usleep(100000);
  CHECK(h->kind_of("/x") == ObjectKind::Dataset);
  CHECK(e.helpers()->failures() == 0);
}

TEST_CASE("helpers: a truncated file serves the chunks before the cut, EIO past it", "[h5helper]") {
  FileSpec f;
  f.path = scratch_path("helper_truncated.h5");
  ::unlink(f.path.c_str());
  DsetSpec first;
  first.name = "first";
  first.layout = "contiguous";
  first.dims = {64, 32};
  write_dataset(f, first);
  DsetSpec d;
  d.name = "data";
  d.dims = {40, 256};
  d.chunks = {4, 256};  // 10 chunks of 2 KiB, written last: at the end of the file
  d.deflate = true;
  write_dataset(f, d, 7);
  const std::vector<uint8_t> want_first = h5_read_all(f.path, "/first"), want = h5_read_all(f.path, "/data");
  struct stat st;
  REQUIRE(::stat(f.path.c_str(), &st) == 0);
  // Where chunk 7 lies, from libhdf5 (the cut goes through it).
  haddr_t addr7 = HADDR_UNDEF;
  {
    hid_t fid = H5Fopen(f.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t did = H5Dopen2(fid, "/data", H5P_DEFAULT);
    hsize_t off[2] = {28, 0};
    unsigned mask = 0;
    hsize_t size = 0;
    REQUIRE(H5Dget_chunk_info_by_coord(did, off, &mask, &addr7, &size) >= 0);
    H5Dclose(did);
    H5Fclose(fid);
    REQUIRE(addr7 + size <= uint64_t(st.st_size));
  }
  REQUIRE(::truncate(f.path.c_str(), static_cast<off_t>(addr7 + 100)) == 0);

  // In process libhdf5 refuses the file, as h5py does.
  EngineOptions local_opts = with_helpers();
  local_opts.helper.path.clear();
  Engine local(local_opts);
  CHECK_THROWS_AS(local.open_file(f.path)->dataset_info("/data"), Error);

  Engine remote(with_helpers());
  auto rf = remote.open_file(f.path);
  CHECK(rf->list_group("/").size() == 2);
  CHECK(read_all(remote, f.path, "/first") == want_first);
  auto a = rf->dataset_array("/data");
  const uint64_t chunk = 4 * 256 * 2;
  std::vector<uint8_t> buf(chunk);
  for (uint64_t c = 0; c < 10; ++c) {
    INFO("chunk " << c);
    if (c < 7) {
      remote.read_bytes(*a, c * chunk, chunk, buf.data());
      CHECK(std::memcmp(buf.data(), want.data() + c * chunk, chunk) == 0);
      continue;
    }
    try {
      remote.read_bytes(*a, c * chunk, chunk, buf.data());
      FAIL("chunk past the cut read without error");
    } catch (const Error& e) {
      CHECK(e.code() == EIO);
      const std::string msg = e.what();
      CHECK(msg.find("helper_truncated.h5:/data: chunk (" + std::to_string(c) + ",0)") != std::string::npos);
      CHECK(msg.find("past the end of the file") != std::string::npos);
    }
  }
  CHECK(remote.helpers()->failures() == 0);
}
