// Virtual datasets read through core compared with H5Dread of the VDS (libhdf5 follows the
// mappings itself): other files, same file, strided, shape-changing, gaps, nested, missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

struct Mapping {
  std::string file, dset;
  std::vector<hsize_t> vstart, vstride, vcount, vblock;  // empty stride = 1s
  std::vector<hsize_t> sstart, sstride, scount, sblock;  // all empty = select all
};

void make_vds(const std::string& path, const std::string& name, hid_t type, std::vector<hsize_t> dims,
              const std::vector<Mapping>& maps, const std::vector<uint8_t>& fill = {}) {
  hid_t fid = ::access(path.c_str(), F_OK) == 0 ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                                                 : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(fid >= 0);
  hid_t vspace = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (!fill.empty()) H5Pset_fill_value(dcpl, type, fill.data());
  for (const auto& m : maps) {
    // Source extent: ask the source file (it must exist when the mapping is made unless we
    // give the extent explicitly; tests always create sources first or use sblock).
    std::vector<hsize_t> sdims;
    hid_t sf = H5Fopen(m.file == "." ? path.c_str() : (scratch_dir() + "/" + m.file).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (sf >= 0) {
      hid_t sd = H5Dopen2(sf, m.dset.c_str(), H5P_DEFAULT);
      hid_t ss = H5Dget_space(sd);
      sdims.resize(static_cast<size_t>(H5Sget_simple_extent_ndims(ss)));
      H5Sget_simple_extent_dims(ss, sdims.data(), nullptr);
      H5Sclose(ss);
      H5Dclose(sd);
      H5Fclose(sf);
    } else {
      H5Eclear2(H5E_DEFAULT);
      for (size_t k = 0; k < m.sblock.size(); ++k) sdims.push_back(m.sstart[k] + m.scount[k] * m.sblock[k]);
    }
    hid_t src = H5Screate_simple(static_cast<int>(sdims.size()), sdims.data(), nullptr);
    if (!m.sstart.empty())
      REQUIRE(H5Sselect_hyperslab(src, H5S_SELECT_SET, m.sstart.data(), m.sstride.empty() ? nullptr : m.sstride.data(),
                                  m.scount.data(), m.sblock.data()) >= 0);
    hid_t vs = H5Scopy(vspace);
    REQUIRE(H5Sselect_hyperslab(vs, H5S_SELECT_SET, m.vstart.data(), m.vstride.empty() ? nullptr : m.vstride.data(),
                                m.vcount.data(), m.vblock.data()) >= 0);
    REQUIRE(H5Pset_virtual(dcpl, vs, m.file.c_str(), m.dset.c_str(), src) >= 0);
    H5Sclose(vs);
    H5Sclose(src);
  }
  hid_t ds = H5Dcreate2(fid, name.c_str(), type, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(vspace);
  H5Fclose(fid);
}

// A VDS source: scratch file `name` holding /data of `dims` uint16 (pattern `seed`), one row
// per chunk with deflate, or contiguous.
void write_source(const std::string& name, std::vector<hsize_t> dims, bool chunked, uint32_t seed) {
  FileSpec f;
  f.path = scratch_path(name);
  DsetSpec d;
  d.name = "data";
  d.chunks = dims;
  d.chunks[0] = 1;
  d.dims = std::move(dims);
  d.layout = chunked ? "chunked" : "contiguous";
  d.deflate = chunked;
  write_dataset(f, d, seed);
}

void compare_whole(TestCore& e, const std::string& path, const std::string& dset) {
  INFO(path << ":" << dset);
  auto oracle = h5_read_all(path, dset);
  auto a = e.open_file(path)->dataset_array(dset);
  REQUIRE(a->nbytes() == oracle.size());
  std::vector<uint8_t> got(oracle.size(), 0xAB);
  e.read_bytes(*a, 0, got.size(), got.data());
  REQUIRE(got == oracle);
  // And in odd pieces.
  for (uint64_t step : {uint64_t(1), uint64_t(333), uint64_t(4099)}) {
    std::vector<uint8_t> pieces(oracle.size());
    for (uint64_t off = 0; off < oracle.size(); off += step)
      e.read_bytes(*a, off, std::min(step, oracle.size() - off), pieces.data() + off);
    REQUIRE(pieces == oracle);
    if (oracle.size() > 20000 && step == 1) break;
  }
}

}  // namespace

TEST_CASE("virtual datasets follow their mappings like libhdf5", "[core][vds]") {
  CoreOptions o;
  o.threads = 2;
  o.cache_bytes = 4 << 20;
  TestCore e(o);
  // Sources: 4 module files of (10, 6, 5) uint16, chunked+deflate or contiguous.
  for (int m = 0; m < 4; ++m)
    write_source("vsrc" + std::to_string(m) + ".h5", {10, 6, 5}, m % 2 == 0, static_cast<uint32_t>(100 + m));
  const std::string vpath = scratch_path("vds.h5");
  // Concatenation along axis 0 (EuXFEL overview style).
  std::vector<Mapping> concat;
  for (int m = 0; m < 4; ++m)
    concat.push_back({"vsrc" + std::to_string(m) + ".h5", "/data", {hsize_t(10 * m), 0, 0}, {}, {1, 1, 1}, {10, 6, 5}, {}, {}, {}, {}});
  make_vds(vpath, "concat", H5T_STD_U16LE, {40, 6, 5}, concat);
  // Stacked: each module into one index of a new axis (CXI style), with a missing module gap.
  std::vector<Mapping> stacked;
  for (int m : {0, 1, 3})
    stacked.push_back({"vsrc" + std::to_string(m) + ".h5", "/data", {0, hsize_t(m), 0, 0}, {}, {1, 1, 1, 1}, {10, 1, 6, 5}, {}, {}, {}, {}});
  make_vds(vpath, "stacked", H5T_STD_U16LE, {10, 4, 6, 5}, stacked, {0xFF, 0x7F});
  // Frames interleaved: module m's frames at rows m, m+4, m+8, ... (strided virtual side).
  std::vector<Mapping> inter;
  for (int m = 0; m < 4; ++m)
    inter.push_back({"vsrc" + std::to_string(m) + ".h5", "/data", {hsize_t(m), 0, 0}, {4, 1, 1}, {10, 1, 1}, {1, 6, 5}, {}, {}, {}, {}});
  make_vds(vpath, "interleaved", H5T_STD_U16LE, {40, 6, 5}, inter);
  // Strided source: every other frame of module 0, reversed roles.
  std::vector<Mapping> sstrided = {{"vsrc0.h5", "/data", {0, 0, 0}, {}, {1, 1, 1}, {5, 6, 5}, {1, 0, 0}, {2, 1, 1}, {5, 1, 1}, {1, 6, 5}}};
  make_vds(vpath, "src_strided", H5T_STD_U16LE, {5, 6, 5}, sstrided);
  // Sub-block of a source with gaps around it.
  std::vector<Mapping> window = {{"vsrc2.h5", "/data", {2, 1, 1}, {}, {1, 1, 1}, {3, 4, 3}, {4, 2, 2}, {}, {1, 1, 1}, {3, 4, 3}}};
  make_vds(vpath, "window", H5T_STD_U16LE, {8, 6, 5}, window, {7, 0});
  // Same-file source and VDS over VDS.
  {
    FileSpec f;
    f.path = vpath;
    DsetSpec d;
    d.name = "local";
    d.dims = {12, 5};
    d.layout = "contiguous";
    write_dataset(f, d, 55);
  }
  make_vds(vpath, "same_file", H5T_STD_U16LE, {12, 5}, {{".", "/local", {0, 0}, {}, {1, 1}, {12, 5}, {}, {}, {}, {}}});
  make_vds(vpath, "nested", H5T_STD_U16LE, {20, 6, 5},
           {{".", "/concat", {0, 0, 0}, {}, {1, 1, 1}, {20, 6, 5}, {10, 0, 0}, {}, {1, 1, 1}, {20, 6, 5}}});

  for (auto name : {"/concat", "/stacked", "/interleaved", "/src_strided", "/window", "/same_file", "/nested"})
    compare_whole(e, vpath, name);

  auto info = e.open_file(vpath)->dataset_info("/concat");
  CHECK(info->layout == "virtual");
  REQUIRE(info->vds.size() == 4);
  CHECK(info->vds[1].resolved_file == scratch_path("vsrc1.h5"));
  CHECK(info->read_path == "direct");
}

TEST_CASE("a missing VDS source is an error unless fill is asked for", "[core][vds]") {
  FileSpec f;
  f.path = scratch_path("vmiss_src.h5");
  DsetSpec d;
  d.name = "data";
  d.dims = {10, 4};
  d.layout = "contiguous";
  write_dataset(f, d);
  const std::string vpath = scratch_path("vmiss.h5");
  make_vds(vpath, "v", H5T_STD_U16LE, {20, 4},
           {{"vmiss_src.h5", "/data", {0, 0}, {}, {1, 1}, {10, 4}, {}, {}, {}, {}},
            {"gone.h5", "/data", {10, 0}, {}, {1, 1}, {10, 4}, {0, 0}, {}, {1, 1}, {10, 4}}});
  const uint64_t half = 10 * 4 * 2;
  {
    TestCore e(CoreOptions{});
    auto a = e.open_file(vpath)->dataset_array("/v");
    std::vector<uint8_t> buf(2 * half);
    try {
      e.read_bytes(*a, 0, buf.size(), buf.data());
      FAIL("read over a missing source succeeded");
    } catch (const Error& err) {
      CHECK(err.code() == EIO);
      CHECK(std::string(err.what()).find("gone.h5") != std::string::npos);
    }
    // The part that maps to an existing file still reads.
    e.read_bytes(*a, 0, half, buf.data());
    auto src = h5_read_all(f.path, "/data");
    REQUIRE(std::memcmp(buf.data(), src.data(), half) == 0);
  }
  {
    CoreOptions o;
    o.vds_missing_fill = true;
    TestCore e(o);
    auto a = e.open_file(vpath)->dataset_array("/v");
    std::vector<uint8_t> buf(2 * half, 0xAA);
    e.read_bytes(*a, 0, buf.size(), buf.data());
    auto oracle = h5_read_all(vpath, "/v");  // libhdf5 fills the missing part
    REQUIRE(buf == oracle);
  }
}

TEST_CASE("with HDF5 helpers, a VDS's sources' metadata come in one request per helper", "[core][vds][h5helper]") {
  constexpr int kSources = 8;
  std::vector<Mapping> maps;
  for (int m = 0; m < kSources; ++m) {
    write_source("vbatch" + std::to_string(m) + ".h5", {5, 6, 5}, true, static_cast<uint32_t>(300 + m));
    maps.push_back({"vbatch" + std::to_string(m) + ".h5", "/data", {hsize_t(5 * m), 0, 0}, {}, {1, 1, 1}, {5, 6, 5}, {}, {}, {}, {}});
  }
  const std::string vpath = scratch_path("vbatch.h5");
  make_vds(vpath, "v", H5T_STD_U16LE, {5 * kSources, 6, 5}, maps);
  CoreOptions o;
  o.threads = 2;
  o.helper = h5d::test::helper_options(2, 20000);
  TestCore e(o);
  const uint64_t r0 = e.helpers()->requests();
  auto a = e.open_file(vpath)->dataset_array("/v");
  std::vector<uint8_t> got(a->nbytes());
  e.read_bytes(*a, 0, got.size(), got.data());
  CHECK(e.helpers()->requests() - r0 <= 3);  // the VDS's own, then one per helper (not one per source: 9)
  CHECK(got == h5_read_all(vpath, "/v"));
  CHECK(e.helpers()->failures() == 0);
}
