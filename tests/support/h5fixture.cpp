#include "tests/support/h5fixture.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace h5d::test {

std::string scratch_dir() {
  static std::string dir = [] {
    const char* base = std::getenv("H5D_TEST_TMP");
    std::string b = base && *base ? base : "/tmp";
    ::mkdir(b.c_str(), 0755);
    std::string d = b + "/h5d-unit-" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    // Mostly small values with noise: compresses somewhat, like detector data.
    v[i] = (i % 2) ? static_cast<uint8_t>((x >> 24) & 0x07) : static_cast<uint8_t>(x >> 16);
  }
  return v;
}

#define CHECK_H5(expr)                                                  \
  do {                                                                  \
    if ((expr) < 0) throw std::runtime_error("HDF5 call failed: " #expr); \
  } while (0)

void write_dataset(const FileSpec& f, const DsetSpec& d, uint32_t seed) {
  hid_t fid;
  if (::access(f.path.c_str(), F_OK) == 0) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (f.latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    fid = H5Fopen(f.path.c_str(), H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
  } else {
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (f.userblock) CHECK_H5(H5Pset_userblock(fcpl, f.userblock));
    if (f.sizeof_offsets != 8 || f.sizeof_lengths != 8) CHECK_H5(H5Pset_sizes(fcpl, f.sizeof_offsets, f.sizeof_lengths));
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (f.latest) CHECK_H5(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
    fid = H5Fcreate(f.path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fcpl);
    H5Pclose(fapl);
  }
  if (fid < 0) throw std::runtime_error("cannot create " + f.path);
  const int rank = static_cast<int>(d.dims.size());
  const auto& maxd = d.maxdims.empty() ? d.dims : d.maxdims;
  hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, d.dims.data(), maxd.data());
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (d.layout == "chunked") {
    CHECK_H5(H5Pset_chunk(dcpl, rank, d.chunks.data()));
    if (d.fletcher32) CHECK_H5(H5Pset_fletcher32(dcpl));
    if (d.shuffle) CHECK_H5(H5Pset_shuffle(dcpl));
    if (d.deflate) CHECK_H5(H5Pset_deflate(dcpl, static_cast<unsigned>(d.deflate_level)));
    for (const auto& [id, cd] : d.extra_filters)
      CHECK_H5(H5Pset_filter(dcpl, static_cast<H5Z_filter_t>(id), H5Z_FLAG_MANDATORY, cd.size(), cd.data()));
    if (d.dont_filter_partial) CHECK_H5(H5Pset_chunk_opts(dcpl, H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS));
  } else if (d.layout == "compact") {
    CHECK_H5(H5Pset_layout(dcpl, H5D_COMPACT));
  } else {
    CHECK_H5(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  }
  if (d.alloc_early) CHECK_H5(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  if (d.fill_never) CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  if (!d.fill_value.empty()) CHECK_H5(H5Pset_fill_value(dcpl, d.type, d.fill_value.data()));
  hid_t ds = H5Dcreate2(fid, d.name.c_str(), d.type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error("cannot create dataset " + d.name);
  if (d.write_data) {
    const size_t esize = H5Tget_size(d.type);
    hsize_t n = 1;
    hid_t mspace = H5S_ALL, fspace = H5S_ALL;
    if (!d.write_start.empty()) {
      for (auto c : d.write_count) n *= c;
      fspace = H5Dget_space(ds);
      CHECK_H5(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, d.write_start.data(), nullptr, d.write_count.data(), nullptr));
      mspace = H5Screate_simple(rank, d.write_count.data(), nullptr);
    } else {
      for (auto c : d.dims) n *= c;
    }
    auto bytes = pattern_bytes(n * esize, seed);
    // Pattern bytes may form NaN floats or invalid bools: both are still exact bytes, which is
    // all these tests compare.
    if (n > 0) CHECK_H5(H5Dwrite(ds, d.type, mspace, fspace, H5P_DEFAULT, bytes.data()));
    if (mspace != H5S_ALL) H5Sclose(mspace);
    if (fspace != H5S_ALL) H5Sclose(fspace);
  }
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(fid);
}

std::vector<uint8_t> h5_read_all(const std::string& path, const std::string& dset) {
  hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) throw std::runtime_error("cannot open " + path);
  hid_t ds = H5Dopen2(fid, dset.c_str(), H5P_DEFAULT);
  hid_t t = H5Dget_type(ds);
  if (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) <= 0) {
    // h5py reads fixed strings into a null-padded type (libhdf5 converts NUL-terminated and
    // space-padded ones: bytes after a terminator and trailing pad spaces become NULs).
    hid_t nullpad = H5Tcopy(t);
    H5Tset_strpad(nullpad, H5T_STR_NULLPAD);
    H5Tclose(t);
    t = nullpad;
  }
  hid_t sp = H5Dget_space(ds);
  hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<uint8_t> out(static_cast<size_t>(n) * H5Tget_size(t));
  if (n > 0 && H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw std::runtime_error("H5Dread failed for " + dset);
  H5Sclose(sp);
  H5Tclose(t);
  H5Dclose(ds);
  H5Fclose(fid);
  return out;
}

}  // namespace h5d::test
