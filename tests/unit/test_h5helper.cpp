// The helper processes (core/h5lib/h5helper.h) against the built h5direct-helper: an engine with
// helpers answers like one without (the same code runs in the helper), and a helper killed from
// outside while idle is restarted without marking anything bad.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "helper/h5lib.h"
#include "core/h5lib/metadata.h"
#include "tests/support/h5fixture.h"
#include "vfs/providers.h"
#include "vfs/vfs.h"

using namespace h5d;
using namespace h5d::test;

namespace {

CoreOptions with_helpers() {
  CoreOptions o;
  o.helper = h5d::test::helper_options(2, 20000);
  return o;
}

// The same engine options with libhdf5 in this process: the oracle the helpers' answers must equal.
CoreOptions in_process() {
  CoreOptions o = with_helpers();
  o.helper.path.clear();
  return o;
}

std::vector<uint8_t> read_all(TestCore& e, const std::string& file, const std::string& dset) {
  auto a = e.open_file(file)->dataset_array(dset);
  std::vector<uint8_t> out(a->nbytes());
  e.read_bytes(*a, 0, out.size(), out.data());
  return out;
}

// A file holding /x, 10 uint16 stored contiguously: what the lifecycle tests ask about.
std::string small_file(const std::string& name) {
  FileSpec f;
  f.path = scratch_path(name);
  DsetSpec d;
  d.name = "x";
  d.type = H5T_STD_U16LE;
  d.dims = {10};
  d.layout = "contiguous";
  write_dataset(f, d);
  return f.path;
}

// This process's live helper children, by pid (found in /proc: parent = us, not a zombie).
std::vector<pid_t> helper_children() {
  std::vector<pid_t> out;
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
      if (ppid == ::getpid() && state != "Z") out.push_back(pid);
    }
    ::closedir(proc);
  }
  return out;
}

}  // namespace

TEST_CASE("helpers: start lazily, or all at once by start_idle, which is no request", "[h5helper]") {
  const std::string path = small_file("helper_start.h5");
  CoreOptions o = with_helpers();
  o.helper.count = 3;
  TestCore e(o);
  CHECK(helper_children().empty());  // nothing runs before it is needed or asked for
  e.helpers()->start_idle();
  const std::vector<pid_t> started = helper_children();
  CHECK(started.size() == 3);
  CHECK(e.helpers()->requests() == 0);
  // The requests then go to the helpers already running; a second start_idle starts none.
  CHECK(e.open_file(path)->kind_of("/x") == ObjectKind::Dataset);
  e.helpers()->start_idle();
  std::vector<pid_t> now = helper_children();
  std::sort(now.begin(), now.end());
  std::vector<pid_t> before = started;
  std::sort(before.begin(), before.end());
  CHECK(now == before);
  CHECK(e.helpers()->failures() == 0);
}

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
  TestCore local(in_process()), remote(with_helpers());
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
  const std::string path = small_file("helper_kill.h5");
  CoreOptions o = with_helpers();
  o.helper.count = 1;
  TestCore e(o);
  auto h = e.open_file(path);
  REQUIRE(h->kind_of("/x") == ObjectKind::Dataset);
  // Kill this process's helper children, by pid (found in /proc: parent = us).
  int killed = 0;
  for (pid_t pid : helper_children())
    if (::kill(pid, SIGKILL) == 0) ++killed;
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
  TestCore local(in_process());
  CHECK_THROWS_AS(local.open_file(f.path)->dataset_info("/data"), Error);

  TestCore remote(with_helpers());
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

TEST_CASE("helpers: datasets_details answers as dataset_details does, in one request for all", "[h5helper]") {
  FileSpec f;
  f.path = scratch_path("helper_batch.h5");
  for (const char* name : {"a", "b", "c"}) {
    DsetSpec d;
    d.name = name;
    d.type = H5T_IEEE_F32LE;
    d.dims = {4, 3};
    d.chunks = {1, 3};
    d.deflate = std::strcmp(name, "b") == 0;
    write_dataset(f, d);
  }
  {  // an attribute on /b, which the batch must carry like the single request
    hid_t fid = H5Fopen(f.path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t did = H5Dopen2(fid, "/b", H5P_DEFAULT);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t aid = H5Acreate2(did, "units", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    const int64_t v = 42;
    H5Awrite(aid, H5T_NATIVE_INT64, &v);
    H5Aclose(aid);
    H5Sclose(sp);
    H5Dclose(did);
    H5Fclose(fid);
  }
  TestCore local(in_process()), remote(with_helpers());
  auto lf = local.open_file(f.path), rf = remote.open_file(f.path);
  const std::vector<std::string> paths = {"/a", "/b", "/c"};
  const uint64_t before = remote.helpers()->requests();
  auto got = rf->datasets_details("/", paths);
  CHECK(remote.helpers()->requests() - before == 1);
  REQUIRE(got.size() == paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    INFO(paths[i]);
    auto want = lf->dataset_details(paths[i]);
    CHECK(got[i]->path == paths[i]);
    CHECK(got[i]->shape == want->shape);
    CHECK(got[i]->dtype.typestr == want->dtype.typestr);
    CHECK(got[i]->chunks == want->chunks);
    CHECK(got[i]->filters.size() == want->filters.size());
    CHECK(got[i]->read_path == want->read_path);
    REQUIRE(got[i]->attrs.size() == want->attrs.size());
    for (size_t k = 0; k < want->attrs.size(); ++k) CHECK(got[i]->attrs[k].first == want->attrs[k].first);
    // What the batch learnt is kept: the array needs no further request, and reads as H5Dread.
    const uint64_t r0 = remote.helpers()->requests();
    CHECK(read_all(remote, f.path, paths[i]) == h5_read_all(f.path, paths[i]));
    CHECK(remote.helpers()->requests() == r0);
  }
  REQUIRE(got[1]->attrs.size() == 1);
  CHECK(got[1]->attrs[0].first == "units");
  // One missing dataset fails the batch with the helper's ENOENT, as dataset_details would.
  try {
    rf->datasets_details("/", {"/a", "/missing"});
    FAIL("no error for a missing dataset");
  } catch (const Error& e) {
    CHECK(e.code() == ENOENT);
  }
  CHECK(remote.helpers()->failures() == 0);
}

TEST_CASE("helpers: string and integer reads convert in pieces when larger than the transfer buffer", "[h5helper]") {
  // h5::transfer_for sizes libhdf5's conversion buffer to the read, at most 1 MiB: 200,000
  // variable-length strings (16 bytes each in the file) and 300,000 big-endian integers convert
  // in several pieces, and must still read back exactly what was written.
  const std::string path = scratch_path("helper_strings.h5");
  const size_t n = 200000, ni = 300000;
  std::vector<std::string> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = "s" + std::to_string(i * 7919 % 100003);
  std::vector<uint64_t> ints(ni);
  for (size_t i = 0; i < ni; ++i) ints[i] = i * 2654435761u;
  {
    hid_t fid = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t vt = H5Tcopy(H5T_C_S1);
    H5Tset_size(vt, H5T_VARIABLE);
    hsize_t dims = n;
    hid_t sp = H5Screate_simple(1, &dims, nullptr);
    hid_t did = H5Dcreate2(fid, "/vlen", vt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> ptrs(n);
    for (size_t i = 0; i < n; ++i) ptrs[i] = want[i].c_str();
    REQUIRE(H5Dwrite(did, vt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) >= 0);
    H5Dclose(did);
    hid_t ft = H5Tcopy(H5T_C_S1);
    H5Tset_size(ft, 12);
    std::vector<char> fixed(n * 12, 0);
    for (size_t i = 0; i < n; ++i) std::memcpy(&fixed[i * 12], want[i].data(), std::min<size_t>(12, want[i].size()));
    did = H5Dcreate2(fid, "/fixed", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(H5Dwrite(did, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, fixed.data()) >= 0);
    H5Dclose(did);
    H5Sclose(sp);
    dims = ni;
    sp = H5Screate_simple(1, &dims, nullptr);
    did = H5Dcreate2(fid, "/ints", H5T_STD_U64BE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(H5Dwrite(did, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ints.data()) >= 0);
    H5Dclose(did);
    H5Sclose(sp);
    H5Tclose(ft);
    H5Tclose(vt);
    H5Fclose(fid);
  }
  TestCore local(in_process()), remote(with_helpers());
  for (TestCore* e : {&local, &remote}) {
    INFO((e == &local ? "in process" : "helper"));
    auto f = e->open_file(path);
    CHECK(euxfel::meta::read_strings(*f, "/vlen") == want);
    auto fixed = euxfel::meta::read_strings(*f, "/fixed");
    REQUIRE(fixed.size() == n);
    for (size_t i = 0; i < n; i += 997) CHECK(fixed[i] == want[i].substr(0, 12));
    std::vector<uint64_t> got;
    REQUIRE(euxfel::meta::try_read_u64(*f, "/ints", got, ni));
    CHECK(got == ints);
  }
}

namespace {

// `n` one-dataset files (chunked, deflate, each with its own values) named <stem>N.h5.
std::vector<std::string> numbered_files(const std::string& stem, size_t n) {
  std::vector<std::string> files;
  for (size_t i = 0; i < n; ++i) {
    FileSpec f;
    f.path = scratch_path(stem + std::to_string(i) + ".h5");
    DsetSpec d;
    d.name = "d";
    d.type = H5T_STD_U16LE;
    d.dims = {6, 4};
    d.chunks = {2, 4};
    d.deflate = true;
    write_dataset(f, d, static_cast<uint32_t>(i + 1));
    files.push_back(f.path);
  }
  return files;
}

}  // namespace

TEST_CASE("helpers: prefetch_infos fetches many files' dataset metadata in one request per helper", "[h5helper]") {
  std::vector<std::string> files = numbered_files("prefetch", 6);
  FileSpec other;  // a file without /d: its answer is an error, the others still land
  other.path = scratch_path("prefetch_other.h5");
  DsetSpec e;
  e.name = "e";
  e.dims = {3};
  e.layout = "contiguous";
  write_dataset(other, e);
  std::vector<std::pair<std::string, std::string>> items;
  for (const std::string& f : files) items.emplace_back(f, "/d");
  items.emplace_back(other.path, "/d");

  TestCore local(in_process()), remote(with_helpers());
  const uint64_t r0 = remote.helpers()->requests();
  remote.files.prefetch_infos(items);
  CHECK(remote.helpers()->requests() - r0 <= 2);  // one per helper (2), not one per file (7)
  const uint64_t r1 = remote.helpers()->requests();
  for (const std::string& f : files) {
    INFO(f);
    auto got = remote.open_file(f)->dataset_info("/d");
    auto want = local.open_file(f)->dataset_info("/d");
    CHECK(got->shape == want->shape);
    CHECK(got->chunks == want->chunks);
    CHECK(got->dtype.typestr == want->dtype.typestr);
    CHECK(got->filters.size() == want->filters.size());
    CHECK(got->read_path == want->read_path);
    CHECK(read_all(remote, f, "/d") == h5_read_all(f, "/d"));
  }
  CHECK(remote.helpers()->requests() == r1);  // all of that was prefetched
  try {
    remote.open_file(other.path)->dataset_info("/d");
    FAIL("no error for a missing dataset");
  } catch (const Error& err) {
    CHECK(err.code() == ENOENT);
  }
  CHECK(remote.helpers()->requests() == r1 + 1);  // the error was asked again, on its own
  // What is cached already is not asked for again.
  remote.files.prefetch_infos(items);
  CHECK(remote.helpers()->requests() <= r1 + 2);  // at most the missing dataset's file, alone
  CHECK(remote.helpers()->failures() == 0);
}

TEST_CASE("helpers: a batch that crashes, hangs or garbles its helper marks no file bad; each file is then asked alone",
          "[h5helper]") {
  const std::string mode = GENERATE(as<std::string>{}, "segv", "hang", "garbage");
  INFO(mode);
  std::vector<std::string> files = numbered_files("prefetch_" + mode, 4);
  const std::string bad = numbered_files("prefetch_crashme_" + mode + "_", 1).front();
  files.insert(files.begin() + 2, bad);
  const std::string control = scratch_path("prefetch_fault_" + mode + ".txt");
  std::ofstream(control) << mode << ":prefetch_crashme";
  ::setenv("H5DIRECT_HELPER_FAULT_FILE", control.c_str(), 1);
  CoreOptions o = with_helpers();
  o.helper.count = 1;        // all five files in one batch
  o.helper.timeout_ms = 1500;  // a hang costs the batch this, then the file's own request
  TestCore remote(o);
  std::vector<std::pair<std::string, std::string>> items;
  for (const std::string& f : files) items.emplace_back(f, "/d");
  remote.files.prefetch_infos(items);  // the batch crashes the helper: nothing is cached
  CHECK(remote.helpers()->failures() == 0);
  for (const std::string& f : files) {
    INFO(f);
    if (f == bad) {
      try {
        remote.open_file(f)->dataset_info("/d");
        FAIL("no error for the file that breaks the helper");
      } catch (const Error& err) {
        CHECK(err.code() == EIO);
        CHECK(std::string(err.what()).find("prefetch_crashme") != std::string::npos);
      }
    } else {
      CHECK(read_all(remote, f, "/d") == h5_read_all(f, "/d"));
    }
  }
  CHECK(remote.helpers()->failures() == 1);  // the crashing file, found by its own request
  ::unsetenv("H5DIRECT_HELPER_FAULT_FILE");
}

TEST_CASE("with HDF5 helpers, listing a group of many datasets takes a request per helper, not one each",
          "[h5helper][vfs]") {
  constexpr int kDatasets = 12;
  const std::string dir = scratch_path("many_dsets");
  ::mkdir(dir.c_str(), 0755);
  FileSpec f;
  f.path = dir + "/many.h5";
  ::unlink(f.path.c_str());
  for (int i = 0; i < kDatasets; ++i) {
    DsetSpec d;
    d.name = "d" + std::to_string(i);
    d.dims = {hsize_t(4 + i), 3};
    d.chunks = {2, 3};
    d.deflate = i % 2 == 1;
    write_dataset(f, d, static_cast<uint32_t>(40 + i));
  }
  TestCore e(with_helpers());
  vfs::VfsOptions vo;
  vfs::Vfs fs(e, e.files, vo, dir);
  vfs::install_builtin_providers(fs, vo);
  const vfs::Attr file_dir = fs.lookup(vfs::Vfs::kRootIno, "many.h5");
  const uint64_t r0 = e.helpers()->requests();
  std::vector<std::string> names;
  for (const auto& d : fs.readdir(file_dir.ino)) names.push_back(d.name);
  // the group's listing, then its datasets' metadata in one batch (13 requests before)
  CHECK(e.helpers()->requests() - r0 <= 2);
  CHECK(e.helpers()->failures() == 0);
  for (int i = 0; i < kDatasets; ++i) {
    const std::string stem = "d" + std::to_string(i);
    INFO(stem);
    CHECK(std::count(names.begin(), names.end(), stem + ".raw") == 1);
    const vfs::Attr raw = fs.lookup(file_dir.ino, stem + ".raw");
    const std::vector<uint8_t> want = h5_read_all(f.path, "/" + stem);
    REQUIRE(raw.size == want.size());
    auto of = fs.open(raw.ino, O_RDONLY);
    std::vector<uint8_t> got(want.size());
    CHECK(of->read(0, got.size(), reinterpret_cast<char*>(got.data())) == got.size());
    CHECK(got == want);
  }
}

TEST_CASE("helpers: attribute names from the object header equal libhdf5's list; loops name their ancestor",
          "[h5helper]") {
  const std::string path = scratch_path("helper_attrs.h5");
  std::vector<std::string> want_compact, want_dense;
  {
    h5::Lock lk = h5::lock();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);  // dense storage past 8
    hid_t fid = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hid_t g = H5Gcreate2(fid, "/g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dense = H5Gcreate2(fid, "/dense", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_hard(fid, "/g", g, "self", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_hard(fid, "/", g, "up", H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate(H5S_SCALAR);
    auto put = [&](hid_t obj, const std::string& name, int v, std::vector<std::string>& want) {
      hid_t a = H5Acreate2(obj, name.c_str(), H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT, &v);
      H5Aclose(a);
      want.push_back(name);
    };
    for (const char* n : {"zeta", "alpha", "Mid", "a b"}) put(g, n, 1, want_compact);
    for (int i = 0; i < 20; ++i) put(dense, "attr" + std::to_string(19 - i), i, want_dense);
    H5Sclose(space);
    H5Gclose(dense);
    H5Gclose(g);
    H5Fclose(fid);
    H5Pclose(fapl);
  }
  std::sort(want_compact.begin(), want_compact.end());
  std::sort(want_dense.begin(), want_dense.end());
  TestCore local(in_process()), remote(with_helpers());
  auto lf = local.open_file(path), rf = remote.open_file(path);
  for (H5File* f : {lf.get(), rf.get()}) {
    CHECK(f->attribute_names("/g") == want_compact);
    CHECK(f->attribute_names("/dense") == want_dense);
    CHECK(f->attribute_names("/").empty());
    auto attrs = f->attributes("/dense");
    REQUIRE(attrs.size() == 20);
    CHECK(attrs[0].first == "attr0");
    CHECK(attrs[0].second.kind == Value::Kind::Int);
    CHECK(attrs[0].second.i == 19);
    CHECK(f->attribute("/g", "nope").s.rfind("unreadable: ", 0) == 0);
    auto members = f->list_group("/g");
    REQUIRE(members.size() == 2);
    CHECK(members[0].name == "self");
    CHECK(members[0].ancestor == "/g");
    CHECK(members[1].name == "up");
    CHECK(members[1].ancestor == "/");
    for (const auto& m : f->list_group("/")) CHECK(m.ancestor.empty());
  }
}

TEST_CASE("helpers: the engine's metadata is chosen once, and its for_each_file spreads files by helper",
          "[h5helper]") {
  TestCore local(in_process()), remote(with_helpers());
  CHECK_FALSE(local.metadata().isolated());
  CHECK(local.helpers() == nullptr);
  REQUIRE(remote.metadata().isolated());
  REQUIRE(remote.helpers() != nullptr);
  std::vector<std::string> files;
  for (int i = 0; i < 12; ++i) files.push_back("/nowhere/file" + std::to_string(i) + ".h5");
  for (TestCore* e : {&local, &remote}) {
    std::mutex mu;
    std::vector<int> calls(files.size(), 0);
    std::vector<std::thread::id> by(files.size());
    e->metadata().for_each_file(files, [&](size_t i) {
      std::lock_guard<std::mutex> lk(mu);
      ++calls[i];
      by[i] = std::this_thread::get_id();
    });
    CHECK(calls == std::vector<int>(files.size(), 1));  // every file once
    if (e == &local) {  // in turn, on the caller
      for (const auto& id : by) CHECK(id == std::this_thread::get_id());
      continue;
    }
    // The files one helper is preferred for are asked in one lane (one thread): each helper's
    // requests stay with the helper that holds its files open.
    HelperPool& hp = *remote.helpers();
    std::set<size_t> helpers_used;
    for (size_t i = 0; i < files.size(); ++i) {
      helpers_used.insert(hp.preferred(files[i]));
      for (size_t j = 0; j < files.size(); ++j)
        if (hp.preferred(files[i]) == hp.preferred(files[j])) CHECK(by[i] == by[j]);
    }
    CHECK(helpers_used.size() == 2);  // 12 names over 2 helpers: both get some
  }
  CHECK(remote.metadata().counters().requests == 0);  // no request: nothing was asked of a file
}
